"""Messages that say the state of something now replace an older one of the same thing
still queued (`Message.can_replace`): a burst of replay progress, live-run lists or lock
waits costs the event loop one update, and a different segment or query is never lost."""

from __future__ import annotations

from textual.app import App

from florwb.ui.messages import LiveUpdated, ReplayProgressed, StoreWaiting
from florwb_engine.replay.executor import Progress


class Recorder(App[None]):
    """A bare app whose handlers keep what reached them."""

    def __init__(self) -> None:
        super().__init__()
        self.handled: list = []

    def on_live_updated(self, message: LiveUpdated) -> None:
        self.handled.append(message)

    def on_replay_progressed(self, message: ReplayProgressed) -> None:
        self.handled.append(message)

    def on_store_waiting(self, message: StoreWaiting) -> None:
        self.handled.append(message)


def _progress(replay: str, run: str, segment: int, done: int) -> ReplayProgressed:
    return ReplayProgressed(replay, Progress(run, segment, done, 100, "running"))


async def test_a_burst_of_state_messages_is_handled_as_its_last():
    app = Recorder()
    async with app.run_test() as pilot:
        for n in range(200):  # queued before the app handles any of them
            app.post_message(LiveUpdated([f"run-{n}"]))  # type: ignore[list-item]
        await pilot.pause()
        assert [m.live for m in app.handled] == [["run-199"]]

        app.handled.clear()
        for segment in (0, 1):
            for done in range(1, 51):
                app.post_message(_progress("r1", "run-a", segment, done))
        app.post_message(_progress("r2", "run-a", 1, 7))  # another replay's: kept
        await pilot.pause()
        got = [(m.replay_id, m.progress.segment, m.progress.done) for m in app.handled]
        assert got == [("r1", 0, 50), ("r1", 1, 50), ("r2", 1, 7)]

        app.handled.clear()
        for waited in range(30):
            app.post_message(StoreWaiting("pid 12 (python train.py)", float(waited), serial=3))
        app.post_message(StoreWaiting("pid 12 (python train.py)", 0.5, serial=4))
        await pilot.pause()
        assert [(m.serial, m.waited_s) for m in app.handled] == [(3, 29.0), (4, 0.5)]


def test_only_the_same_thing_is_replaced():
    older = _progress("r1", "run-a", 0, 1)
    assert older.can_replace(_progress("r1", "run-a", 0, 2))
    assert not older.can_replace(_progress("r1", "run-b", 0, 2))
    assert not older.can_replace(_progress("r1", "run-a", 1, 2))
    assert not older.can_replace(LiveUpdated([]))
    assert not StoreWaiting("x", 1.0, 1).can_replace(StoreWaiting("x", 2.0, 2))
