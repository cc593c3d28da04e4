"""People-facing views of results: readable tables (`table`) and the one-file run report (`run_report`).

Each is computed first into a structure of values and then rendered per medium (HTML for the app,
the notebook and the report file), so every place shows the same table the same way.
"""
