"""tqdm._monitor of the fake tqdm (see __init__.py)."""

import threading


class TMonitor(threading.Thread):
    def __init__(self, tqdm_cls, sleep_interval):
        super().__init__(name="tqdm_monitor", daemon=True)
        self.was_killed = threading.Event()
        self.sleep_interval = sleep_interval
        self.start()

    def run(self):
        while not self.was_killed.wait(self.sleep_interval):
            pass

    def exit(self):
        self.was_killed.set()
        if self is not threading.current_thread():
            self.join()
