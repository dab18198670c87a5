"""The one model of Python's scopes (analysis/scopes.py) and the two questions asked of it:
propagation's "may a statement here read `x`" (propagate/names.py, loops assumed to run)
and the instrumenter's "which names are surely bound where the loop starts"
(instrument/scopes.py, loops may run zero times). Each case is asked at the statement
`here()` of a small module."""

from __future__ import annotations

import textwrap

import libcst as cst

from florwb_engine.analysis.scopes import CLASS, COMPREHENSION, FUNCTION, MODULE, ScopeTree
from florwb_engine.instrument.scopes import Scopes
from florwb_engine.instrument.script_index import Tree as ScriptTree
from florwb_engine.propagate.match_tree import Tree as MatchTree
from florwb_engine.propagate.names import Bindings


def _code(source: str) -> str:
    return textwrap.dedent(source).lstrip()


def _is_here(node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.SimpleStatementLine)
        and isinstance(node.body[0], cst.Expr)
        and isinstance(call := node.body[0].value, cst.Call)
        and isinstance(call.func, cst.Name)
        and call.func.value == "here"
    )


def propagation_sees(source: str, *names: str) -> dict[str, bool]:
    """Whether propagation counts each name as defined right before `here()`."""
    tree = MatchTree(cst.parse_module(_code(source)))
    statement = next(tn for tn in tree.nodes if _is_here(tn.node))
    block = statement.parent
    assert block is not None and statement.key is not None
    bindings = Bindings(tree)
    scope = bindings.scope_of_block(block)
    at = (block, statement.key)
    return {name: bindings.is_defined(name, scope, statement.idx, at) for name in names}


def instrumenter_sees(source: str) -> set[str]:
    """The names the instrumenter may name right before `here()`."""
    tree = ScriptTree(_code(source))
    point = next(node for node in tree.walk(tree.module) if _is_here(node))
    return set(Scopes(tree).visible(tree.scope_of(point), point))


def test_a_name_bound_in_one_branch_only_is_not_defined_after_the_if() -> None:
    source = """
        import sys
        if len(sys.argv) > 1:
            only_then = 1
            both = "a"
        else:
            only_else = 2
            both = "b"
        here()
    """
    assert propagation_sees(source, "only_then", "only_else", "both") == {
        "only_then": False,
        "only_else": False,
        "both": True,
    }
    seen = instrumenter_sees(source)
    assert "both" in seen and not {"only_then", "only_else"} & seen


def test_a_try_body_binds_for_sure_only_what_every_handler_binds_too() -> None:
    source = """
        try:
            loaded = open("f")
            handle = 1
        except OSError as error:
            handle = None
        here()
    """
    assert propagation_sees(source, "loaded", "handle", "error") == {
        "loaded": False,
        "handle": True,
        "error": False,  # an `except ... as` name is deleted when the handler ends
    }
    seen = instrumenter_sees(source)
    assert "handle" in seen and not {"loaded", "error"} & seen


def test_loop_body_bindings_count_after_the_loop_only_where_loops_are_assumed_to_run() -> None:
    source = """
        for item in range(3):
            last = item
        while False:
            never = 1
        here()
    """
    # propagation: training loops run (a wrong guess fails the replay, which says so)
    assert propagation_sees(source, "item", "last", "never") == {
        "item": True,
        "last": True,
        "never": True,
    }
    # the instrumenter writes into the user's training, which must never crash
    assert not {"item", "last", "never"} & instrumenter_sees(source)


def test_a_global_is_the_modules_and_a_nonlocal_the_enclosing_functions() -> None:
    source = """
        def setup():
            global model
            model = object()

        def outer():
            count = 0
            def bump():
                nonlocal count
                here()
                count += 1
            return bump
    """
    tree = ScopeTree(cst.parse_module(_code(source)))
    module = tree.root
    setup, outer, bump = (s for s in tree.scopes if s.kind == FUNCTION)
    assert module.kind == MODULE and "model" in module.bound_elsewhere
    assert "model" not in setup.bindings and setup.lookup("model") is module
    assert "count" not in bump.bindings and bump.lookup("count") is outer
    assert "count" in outer.bound_elsewhere  # `count += 1` rebinds outer's variable
    assert bump.local_names() == set() and outer.local_names() == {"count", "bump"}
    # bump reads outer's `count`, bound whenever bump can run; and the global `model`
    assert propagation_sees(source, "count", "model") == {"count": True, "model": True}
    # at module level a global only a function binds is not bound for sure
    at_module = _code(source).replace("here()", "pass") + "setup()\nhere()\n"
    assert propagation_sees(at_module, "model") == {"model": False}


def test_a_function_that_declares_a_global_binds_it_for_the_instrumenter() -> None:
    source = """
        def main():
            global net
            net = object()
            here()
        main()
    """
    assert "net" in instrumenter_sees(source)
    assert ScopeTree(cst.parse_module(_code(source))).root.binds("net")


def test_a_comprehension_variable_does_not_leak_and_its_walrus_does() -> None:
    source = """
        data = [1, 2]
        squares = [v * v for v in data]
        total = sum(w for w in squares)
        pairs = {k: j for k in data for j in data if (seen := k)}
        here()
    """
    tree = ScopeTree(cst.parse_module(_code(source)))
    comprehensions = [s for s in tree.scopes if s.kind == COMPREHENSION]
    assert [set(s.bindings) for s in comprehensions] == [{"v"}, {"w"}, {"k", "j"}]
    assert set(tree.root.bindings) == {"data", "squares", "total", "pairs", "seen"}
    assert propagation_sees(source, "v", "w", "k", "squares", "total") == {
        "v": False,
        "w": False,
        "k": False,
        "squares": True,
        "total": True,
    }
    seen = instrumenter_sees(source)
    assert {"squares", "total", "pairs"} <= seen and not {"v", "w", "k", "j"} & seen


def test_class_body_names_are_not_visible_in_its_methods() -> None:
    source = """
        import os
        class Trainer:
            rate = 0.1
            def fit(self, steps=rate):
                here()
        Trainer().fit()
    """
    tree = ScopeTree(cst.parse_module(_code(source)))
    trainer = next(s for s in tree.scopes if s.kind == CLASS)
    fit = next(s for s in tree.scopes if s.kind == FUNCTION)
    assert trainer.lookup("rate") is trainer and fit.lookup("rate") is None
    assert fit.lookup("os") is tree.root and fit.enclosing() is tree.root
    assert propagation_sees(source, "rate", "self", "steps", "os", "Trainer") == {
        "rate": False,
        "self": True,
        "steps": True,
        "os": True,
        "Trainer": True,
    }
    seen = instrumenter_sees(source)
    assert {"self", "steps", "os"} <= seen and "rate" not in seen


def test_a_star_import_may_define_any_name_but_never_a_functions_local() -> None:
    source = """
        from helpers import *
        def train(flag):
            if flag:
                maybe = 1
            annotated: int
            here()
    """
    tree = ScopeTree(cst.parse_module(_code(source)))
    assert tree.root.star and tree.root.lookup("Net") is None
    assert propagation_sees(source, "Net", "maybe", "annotated", "flag") == {
        "Net": True,  # the star import may bind it
        "maybe": False,  # train's own variable, bound in one branch only
        "annotated": False,  # `x: int` makes x train's, and binds nothing
        "flag": True,
    }
    # without the star import, a name nobody binds is not defined
    plain = source.replace("from helpers import *", "import helpers")
    assert propagation_sees(plain, "Net") == {"Net": False}


def test_the_block_scopes_match_the_defs_and_classes_that_own_them() -> None:
    module = cst.parse_module(
        _code(
            """
            class A:
                def f(self):
                    if self:
                        pass
            g = lambda x, y=1: x + y
            """
        )
    )
    tree = ScopeTree(module)
    cls = module.body[0]
    assert isinstance(cls, cst.ClassDef)
    method = cls.body.body[0]
    assert isinstance(method, cst.FunctionDef)
    inner_if = method.body.body[0]
    assert isinstance(inner_if, cst.If)
    assert tree.block_scope(module) is tree.root
    assert tree.block_scope(cls.body) is tree.scope(cls)
    assert tree.block_scope(inner_if.body) is tree.scope(method)
    lam = next(s for s in tree.scopes if s.kind == "lambda")
    assert set(lam.bindings) == {"x", "y"} and lam.body is None and lam.parent is tree.root
