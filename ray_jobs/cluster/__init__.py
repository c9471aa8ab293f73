"""What every job is hosted on: Ray and the model pools (``session``), how many replicas and
workers each model gets (``sizing``, ``allocation``), pool supervision and moves between waves
(``supervisor``, ``moves``), the driver's signals and watchdog (``signals``), and what this machine
gives a replica (``doctor``).

It knows no job: nothing here imports ``run``, ``build``, ``judging``, ``budget``, ``outputs`` or
``cli``. A job hands it what it needs (the signals' tally is a callback the job registers).
"""
