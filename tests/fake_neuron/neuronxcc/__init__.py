"""FAKE neuronx-cc Python package for tests: NOT the AWS compiler. torch_neuronx.analyze imports
``neuronxcc`` and reports its ``__version__`` (torch_neuronx/xla_impl/analyze.py); nothing else is
provided. The version is the compiler of Neuron 2.32.0 (SDK src/helperscripts/n2-manifest.json)."""

__version__ = "2.27.5334.0+fake"
