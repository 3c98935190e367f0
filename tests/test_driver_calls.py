"""Per-claim calls with a deadline (gpudra/driver/calls.py), driven by events, not by the clock."""

from __future__ import annotations

import threading

from gpudra.driver.calls import CallAbandoned, CallToken, ClaimCalls


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


def test_a_call_past_its_deadline_is_abandoned_and_a_retry_is_refused_until_it_ends():
    calls = ClaimCalls(deadline_s=0.05)
    release, tokens = threading.Event(), []

    def stuck(token):
        tokens.append(token)
        release.wait(30)
        return "late" if token.commit() else "rolled back"

    [first] = calls.run([(("prepare", "x"), stuck)])
    assert isinstance(first, CallAbandoned) and "did not finish" in str(first)
    [retry] = calls.run([(("prepare", "x"), stuck)])
    assert isinstance(retry, CallAbandoned) and "still running" in str(retry)
    assert calls.run([(("prepare", "y"), lambda token: "other")]) == ["other"]
    assert tokens[0].abandoned
    release.set()
    assert calls.wait_idle(30)
    assert calls.run([(("prepare", "x"), lambda token: "fresh")]) == ["fresh"]


def test_a_call_that_committed_before_its_deadline_keeps_its_result():
    calls = ClaimCalls(deadline_s=0.05)
    committed, release = threading.Event(), threading.Event()

    def slow_after_commit(token):
        assert token.commit()
        committed.set()
        release.wait(30)
        return "prepared"

    answer = []
    caller = threading.Thread(target=lambda: answer.extend(calls.run([(("prepare", "c"), slow_after_commit)])))
    caller.start()
    assert committed.wait(30)
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
    calls = ClaimCalls(deadline_s=0.01, max_running=2)
    release = threading.Event()
    for key in ("p", "q"):
        calls.run([(("prepare", key), lambda token: release.wait(30))])
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
