"""The measurement engines' wing: ways of putting load on a served model and timing it.

Today's fixed-shape engine lives in ``workbench.measure.loadgen``; ``streaming`` measures decoupled
(token-streaming) models in tokens.
"""
