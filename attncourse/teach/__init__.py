"""What the notebooks use to teach: plots, ``compare``, seeding, devices, offline model loading, the probe."""
