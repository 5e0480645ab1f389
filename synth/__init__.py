"""synth: collective-communication schedule synthesis with verified outputs."""

__version__ = "0.1.0"
