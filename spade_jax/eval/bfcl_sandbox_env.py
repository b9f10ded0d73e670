"""BFCL multi-turn executable backends as one sandboxed environment (STANDARD LIBRARY ONLY).

`spade_jax.eval.bfcl_backend.backend_source()` fills `_SOURCES` with the backend modules' text read from the
installed `bfcl-eval` package and sends the whole file to a sandbox worker. There each backend module runs
unchanged under its own package name (an in-memory module, so its `from bfcl_eval... import` lines resolve);
`mpmath`, the one third-party import, is replaced by a small `decimal` stand-in. The environment keeps two
sets of instances per episode, the agent's and the ground truth's, and implements BFCL's per-turn checks:
state (public attributes equal) and response (the turn's ground-truth results all among the agent's results).
"""

from __future__ import annotations

import ast
import copy
import decimal
import inspect
import json
import sys
import types

from spade_jax.envs.base import TextEnv

_SOURCES: dict[str, str] = {}  # module short name -> source text; filled in by bfcl_backend.backend_source()
PREFIX = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
CLASS_MODULES = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "posting_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
STATELESS = ("MathAPI",)
BLOCKED = ("kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run")  # as BFCL's executor


# ------------------------------------------------------------------------------------------ mpmath stand-in
class _Mpf:
    """Decimal-backed number standing in for mpmath.mpf (log and division are all BFCL's MathAPI uses)."""

    def __init__(self, value: decimal.Decimal, dps: int):
        self.value, self.dps = value, dps

    def __truediv__(self, other: _Mpf) -> _Mpf:
        with decimal.localcontext() as ctx:
            ctx.prec = self.dps + 5
            return _Mpf(self.value / other.value, self.dps)

    def __float__(self) -> float:
        return float(self.value)

    def __repr__(self) -> str:
        with decimal.localcontext() as ctx:
            ctx.prec = max(1, self.dps)
            return f"mpf('{+self.value}')"

    __str__ = __repr__


def _mpmath_module() -> types.ModuleType:
    mod = types.ModuleType("mpmath")
    mod.mp = types.SimpleNamespace(dps=15)

    def log(x):
        dps = int(mod.mp.dps)
        with decimal.localcontext() as ctx:
            ctx.prec = dps + 5
            return _Mpf(decimal.Decimal(str(x)).ln(), dps)

    mod.log = log
    return mod


def load_backends() -> dict[str, type]:
    """Runs the embedded backend modules once per process; returns class name -> class."""
    cached = getattr(load_backends, "classes", None)
    if cached is not None:
        return cached
    if not _SOURCES:
        raise RuntimeError("BFCL backend sources are not embedded (build this file with backend_source())")
    try:  # in-process the real mpmath is used; a stand-in there would break sympy (and torch) for the process
        import mpmath  # noqa: F401
    except ImportError:  # inside the sandbox third-party packages are not importable
        sys.modules["mpmath"] = _mpmath_module()
    modules = {}
    for short in ["long_context"] + [s for s in _SOURCES if s != "long_context"]:
        name = f"{PREFIX}.{short}"
        mod = types.ModuleType(name)
        mod.__file__ = f"<bfcl-eval {short}.py>"
        sys.modules[name] = mod
        exec(compile(_SOURCES[short], mod.__file__, "exec"), mod.__dict__)
        modules[short] = mod
    classes = {cls: getattr(modules[short], cls) for cls, short in CLASS_MODULES.items() if short in modules}
    load_backends.classes = classes
    return classes


# --------------------------------------------------------------------------------------------- call parsing
def parse_call(text: str) -> tuple[str, list, dict]:
    """`name(arg, key=value)` with literal arguments -> (name, args, kwargs); ValueError otherwise."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise ValueError(f"invalid syntax ({e.msg})") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError("not a function call")
    try:
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    except (ValueError, TypeError, SyntaxError) as e:
        raise ValueError(f"arguments must be literals ({e})") from None
    return node.func.id, args, kwargs


def format_result(value) -> str:
    """A call's result as BFCL renders it for the model and the response check."""
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


class _Instances:
    """One set of backend instances (the agent's or the ground truth's) with BFCL's method dispatch."""

    def __init__(self, config: dict, classes: list[str], long_context: bool):
        backends = load_backends()
        self.objects: dict[str, object] = {}
        self.methods: dict[str, object] = {}
        for name in classes:
            if name not in backends:
                raise ValueError(f"unknown BFCL backend class {name!r}")
            obj = backends[name]()
            if name not in STATELESS:
                obj._load_scenario(copy.deepcopy(config.get(name, {})), long_context=long_context)
            self.objects[name] = obj
            for mname, _ in inspect.getmembers(obj, predicate=inspect.ismethod):
                if not mname.startswith("_"):
                    self.methods[mname] = getattr(obj, mname)  # later classes win, as in BFCL

    def execute(self, calls: list[str]) -> list[str]:
        out = []
        for call in calls:
            try:
                name, args, kwargs = parse_call(call)
                if name in BLOCKED:
                    raise Exception(f"Function call {name} is not allowed.")
                if name not in self.methods:
                    raise NameError(f"name '{name}' is not defined")
                out.append(format_result(self.methods[name](*args, **kwargs)))
            except Exception as e:  # every failure is reported to the model, as BFCL does
                out.append(f"Error during execution: {e}")
        return out


def _public_state(obj) -> dict:
    return {k: v for k, v in vars(obj).items() if not k.startswith("_")}


def _short(value, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


class BfclEpisode(TextEnv):
    """One BFCL multi-turn entry: `execute(calls)` for the agent's steps, `end_turn(gt_calls)` at each turn's end."""

    KIND = "tool"
    SKILL = "bfcl multi-turn"
    NAME = "bfcl_multi_turn"

    def __init__(self, max_turns: int = 25, initial_config=None, involved_classes=(), long_context=False, **kw):
        super().__init__(max_turns, **kw)
        self.initial_config = dict(initial_config or {})
        self.involved_classes = list(involved_classes)
        self.long_context = bool(long_context)
        self.model = self.truth = None
        self.model_results: list[str] = []
        self.turn_index = 0
        self.turn_calls = 0

    def setup(self) -> str:
        self.model = _Instances(self.initial_config, self.involved_classes, self.long_context)
        self.truth = _Instances(self.initial_config, self.involved_classes, self.long_context)
        self.model_results, self.turn_index, self.turn_calls = [], 0, 0
        return "BFCL backends ready: " + ", ".join(self.involved_classes)

    def handle(self, action: str):  # unused: step() is replaced below
        return "send a JSON request to step()", 0.0, False

    def step(self, action: str):
        """The host's requests travel as step() actions (the worker serves only the contract's methods):
        `{"op": "execute", "calls": [...]}` or `{"op": "end_turn", "ground_truth": [...]}`; the observation is
        the JSON-encoded answer."""
        try:
            request = json.loads(action)
            op = request["op"]
        except (TypeError, ValueError, KeyError):
            return json.dumps({"error": "bad request"}), 0.0, False, False, {}
        if op == "execute":
            value = self.execute(list(request.get("calls", [])))
        elif op == "end_turn":
            value = self.end_turn(list(request.get("ground_truth", [])))
        else:
            value = {"error": f"unknown op {op!r}"}
        return json.dumps(value), 0.0, False, False, {}

    def execute(self, calls: list) -> list:
        """Runs one agent step (a list of call strings) on the agent's instances; returns one result per call."""
        if self.model is None:
            self.setup()
        results = self.model.execute([str(c) for c in calls])
        self.model_results.extend(results)
        self.turn_calls += len(calls)
        return results

    def end_turn(self, ground_truth: list) -> dict:
        """Runs this turn's ground-truth calls on the reference instances, then BFCL's state and response checks."""
        if self.truth is None:
            self.setup()
        turn, had_calls = self.turn_index, self.turn_calls > 0
        self.turn_index += 1
        self.turn_calls = 0
        truth_results = self.truth.execute([str(c) for c in ground_truth])
        if not ground_truth:
            return {"valid": True, "turn": turn, "checked": False}
        if not had_calls:
            return {
                "valid": False,
                "turn": turn,
                "error_type": "multi_turn:empty_turn_model_response",
                "message": f"Model response list is empty for turn {turn}",
            }
        for name, truth_obj in self.truth.objects.items():
            model_obj = self.model.objects[name]
            diffs = {
                k: {"model": _short(getattr(model_obj, k, None)), "ground_truth": _short(v)}
                for k, v in _public_state(truth_obj).items()
                if getattr(model_obj, k, None) != v
            }
            if diffs:
                return {
                    "valid": False,
                    "turn": turn,
                    "error_type": "multi_turn:instance_state_mismatch",
                    "message": f"Model instance for {name} does not match the state with ground truth instance.",
                    "details": diffs,
                }
        pool = list(self.model_results)
        missing = []
        for item in truth_results:
            try:
                pool.remove(item)
            except ValueError:
                missing.append(item)
        if missing:
            return {
                "valid": False,
                "turn": turn,
                "error_type": "multi_turn:execution_response_mismatch",
                "message": f"Model results so far do not contain all ground truth results for turn {turn}.",
                "details": {"missing": [_short(m) for m in missing]},
            }
        return {"valid": True, "turn": turn, "checked": True}

    def state(self) -> dict:
        """Public state of the agent's instances (for logs)."""
        return {name: json.loads(json.dumps(_public_state(o), default=str)) for name, o in self.model.objects.items()}
