"""Settings for the whole suite: Hypothesis without per-example deadlines (the suite runs
on several workers of a small machine, where a slow example is the machine's doing, not
the code's; what the properties check is correctness, speed is for bench/)."""

from hypothesis import settings

settings.register_profile("sluice", deadline=None)
settings.load_profile("sluice")
