"""Running test code on several threads at once."""

import threading


def run_in_threads(work, count: int) -> None:
    """Run ``work(index)`` for each index below ``count``, each on a thread of its own, all
    started before any is joined; returns once every one has ended."""
    threads = [threading.Thread(target=work, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
