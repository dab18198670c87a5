"""The one answer to "which names are surely bound here" (analysis/bindings.py) that
propagation and the instrumenter share, on small modules."""

from __future__ import annotations

import textwrap

import libcst as cst

from florwb_engine.analysis.bindings import ASSIGN, SurelyBound, ends_flow


def _before_last(source: str, *, loops_run: bool) -> dict:
    """The bindings surely made before the module's last statement."""
    module = cst.parse_module(textwrap.dedent(source).lstrip())
    return SurelyBound(module, loops_run=loops_run).before([module], len(module.body) - 1)


def test_branches_that_never_go_on_do_not_constrain() -> None:
    source = """
        import sys
        if a:
            net = A()
        elif b:
            return_early = 1
            sys.exit(1)
        else:
            net = B()
        try:
            opt = make()
        except ImportError:
            raise
        try:
            sched = make()
        except ValueError:
            pass
        use(net, opt)
    """
    for loops_run in (False, True):
        bound = _before_last(source, loops_run=loops_run)
        assert {"sys", "net", "opt"} <= set(bound)
        assert "return_early" not in bound and "sched" not in bound
        # the model is one of two constructors: both are kept for tracing its origin
        assert bound["net"].kind == ASSIGN and len(bound["net"].alternatives) == 2


def test_a_loop_body_counts_after_the_loop_only_when_loops_are_assumed_to_run() -> None:
    source = """
        for width in sizes:
            net = Net(width)
        while cond(k := 1):
            opt = SGD()
        use(net)
    """
    assumed = _before_last(source, loops_run=True)
    assert {"width", "net", "opt", "k"} <= set(assumed)
    strict = _before_last(source, loops_run=False)
    assert set(strict) == {"k"}  # a while's test runs at least once


def test_the_flow_ends_only_when_every_way_on_is_closed() -> None:
    def first(source: str) -> cst.CSTNode:
        return cst.parse_module(textwrap.dedent(source).lstrip()).body[0]

    assert ends_flow(first("if a:\n    return 1\nelse:\n    sys.exit(2)\n"))
    assert not ends_flow(first("if a:\n    return 1\n"))
    assert ends_flow(first("while True:\n    step()\n"))
    assert not ends_flow(first("while True:\n    if done():\n        break\n"))
    assert ends_flow(first("try:\n    x()\nfinally:\n    raise E\n"))
    assert not ends_flow(first("try:\n    return x()\nexcept E:\n    pass\n"))
