"""Per-claim calls with a deadline (gpudra/kubeletplugin/calls.py), driven by events, not by the clock."""

from __future__ import annotations

import threading

from gpudra.kubeletplugin import calls as calls_module
from gpudra.kubeletplugin.calls import KUBELET_MARGIN_S, CallAbandoned, CallToken, ClaimCalls


def test_results_errors_and_one_run_per_key_in_a_batch():
    calls = ClaimCalls(deadline_s=30)
    runs = []

    def ok(token):
        runs.append("a")
        return "done"

    def boom(token):
        raise ValueError("bad claim")

    out = calls.run([(("prepare", "a"), ok), (("prepare", "b"), boom), (("prepare", "a"), ok)])
    assert out[0] == out[2] == "done" and runs == ["a"]
    assert isinstance(out[1], ValueError)
    assert calls.wait_idle(30) and calls.running() == 0


# A deadline that has already passed when the call starts: the kubelet's own time left (`time_remaining`) is the
# margin KUBELET_MARGIN_S, so the budget is 0 s. Calls that must answer get the full 30 s budget, so no verdict
# depends on how fast a thread starts on a loaded machine.
NO_TIME_LEFT = KUBELET_MARGIN_S


def test_a_call_past_its_deadline_is_abandoned_and_a_retry_is_refused_until_it_ends():
    calls = ClaimCalls(deadline_s=30)
    release, tokens = threading.Event(), []

    def stuck(token):
        tokens.append(token)
        release.wait(30)
        return "late" if token.commit() else "rolled back"

    [first] = calls.run([(("prepare", "x"), stuck)], time_remaining=NO_TIME_LEFT)
    assert isinstance(first, CallAbandoned) and "did not finish" in str(first)
    [retry] = calls.run([(("prepare", "x"), stuck)])
    assert isinstance(retry, CallAbandoned) and "still running" in str(retry)
    assert calls.run([(("prepare", "y"), lambda token: "other")]) == ["other"]
    assert tokens[0].abandoned
    release.set()
    assert calls.wait_idle(30)
    assert calls.run([(("prepare", "x"), lambda token: "fresh")]) == ["fresh"]


class CommitFirstToken(CallToken):
    """A token whose deadline handling waits until the call has committed: the test, not the clock, orders
    "the call commits" before "the deadline passes"."""

    committed = threading.Event()

    def commit(self) -> bool:
        decided = super().commit()
        CommitFirstToken.committed.set()
        return decided

    def abandon(self) -> bool:
        assert CommitFirstToken.committed.wait(30)
        return super().abandon()


def test_a_call_that_committed_before_its_deadline_keeps_its_result(monkeypatch):
    monkeypatch.setattr(calls_module, "CallToken", CommitFirstToken)
    CommitFirstToken.committed.clear()
    calls = ClaimCalls(deadline_s=30)
    release = threading.Event()

    def slow_after_commit(token):
        assert token.commit()
        release.wait(30)
        return "prepared"

    answer = []
    caller = threading.Thread(target=lambda: answer.extend(
        calls.run([(("prepare", "c"), slow_after_commit)], time_remaining=NO_TIME_LEFT)))
    caller.start()
    assert CommitFirstToken.committed.wait(30)
    release.set()
    caller.join(30)
    assert answer == ["prepared"]


def test_the_kubelets_own_deadline_shortens_the_budget():
    calls = ClaimCalls(deadline_s=30)
    release = threading.Event()
    [answer] = calls.run([(("unprepare", "k"), lambda token: release.wait(30))], time_remaining=1.0)
    assert isinstance(answer, CallAbandoned) and "within 0 s" in str(answer)
    release.set()
    assert calls.wait_idle(30)


def test_running_calls_are_capped_and_idle_threads_are_reused():
    calls = ClaimCalls(deadline_s=30, max_running=2)
    release = threading.Event()
    for key in ("p", "q"):
        calls.run([(("prepare", key), lambda token: release.wait(30))], time_remaining=NO_TIME_LEFT)
    [refused] = calls.run([(("prepare", "r"), lambda token: "never runs")])
    assert isinstance(refused, CallAbandoned) and "2 claim calls are running" in str(refused)
    release.set()
    assert calls.wait_idle(30)
    names = []
    calls.run([(("prepare", "s"), lambda token: names.append(threading.get_ident()))])
    threads = {t.ident for t in threading.enumerate() if t.name == "claim-call"}
    for i in range(20):
        calls.run([(("prepare", f"s{i}"), lambda token: names.append(threading.get_ident()))])
    assert set(names) <= threads  # a thread is idle again before its answer: the next call reuses one


def test_token_decides_once():
    token = CallToken()
    assert token.commit() and not token.abandon() and not token.abandoned
    token = CallToken()
    assert token.abandon() and token.abandoned and not token.commit()
