"""A stand-in for tqdm (CI has none), as far as the torch learner's
no_tqdm_monitor() touches it: a bar class whose first bar starts a monitor
thread (tqdm._monitor.TMonitor, named tqdm_monitor) unless monitor_interval
is 0, and subclasses that keep their own monitor, as tqdm's do."""

from tqdm._monitor import TMonitor


class tqdm:
    monitor_interval = 10
    monitor = None

    def __init__(self, iterable=None):
        cls = type(self)
        if cls.monitor_interval and (cls.monitor is None or not cls.monitor.is_alive()):
            cls.monitor = TMonitor(cls, cls.monitor_interval)
        self.iterable = iterable


class tqdm_asyncio(tqdm):  # what tqdm.auto hands transformers
    pass
