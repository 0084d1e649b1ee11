"""TVM Relax: import, compile (cached), run on the Relax VM."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tvmbench.backends.base import Backend, BackendOptions, Paced, unpaced
from tvmbench.models import LoadedModel


def _flatten_tvm(value: Any) -> list[Any]:
    import tvm

    if isinstance(value, tvm.runtime.Tensor):
        return [value]
    out: list[Any] = []
    for v in value:
        out.extend(_flatten_tvm(v))
    return out


def transform_params(vm: Any, params: list[Any], stateful: bool = False) -> list[Any]:
    """Run the lifted weight transforms (layouts, transposes, batch-norm folding) once, at load
    time, so ``main`` receives weights already in the layout its kernels want. ``stateful``: over
    RPC, through the flat entry and the VM's stateful API (RPC passes no tuples)."""
    from tvmbench.compile.names import FLAT_TRANSFORM

    name = FLAT_TRANSFORM if stateful else "main_transform_params"
    try:
        fn = vm[name]
    except Exception:  # compiled without lifting: main takes the weights as imported
        return params
    if not params:
        return params
    if not stateful:
        return _flatten_tvm(fn(params))
    vm.set_input(name, *params)
    vm.invoke_stateful(name)
    return _flatten_tvm(vm.get_outputs(name))


@dataclass(frozen=True)
class TVMOptions(BackendOptions):
    precision: str = "fp32"  # compile/precision.py
    cuda_graph: bool = False
    rpc: dict[str, str] | None = None  # {"tracker": HOST:PORT, "key": KEY}: run on a remote device

    def validate(self) -> None:
        from tvmbench.errors import UserError

        if self.precision not in ("fp32", "fp16", "amp", "bf16"):
            raise UserError(f"unknown --precision '{self.precision}'; use one of fp32, fp16, amp, bf16")


class TVMBackend(Backend):
    name = "tvm"
    tvm_thread_pool = True
    result_key = "tvm_relax"
    label = "TVM"
    reduced_precision = True
    options_type = TVMOptions
    requires = ("tvm",)
    runs_packages = True
    distribution = "apache-tvm"

    # TVM's pool workers yield-spin this many times after a parallel loop before they sleep
    # (TVM's default 300 000). In lockstep that spin ran on into the next framework's turn beside
    # its threads: resnet18 beside ONNX Runtime (15:21-15:26 UTC, Zen 4, 2 runs each), ORT's p99
    # 62.6 ms against 20-22 ms alone, p90 22-23 against 18.5-19.2; with 10 000 spins ORT's p99 was
    # 23-32 ms, p90 19.8, and TVM's own median the same (11.21-11.22 against 11.21-11.32 ms), the
    # gaps between its kernels still covered (1 000 spins stretched TVM's p90 from 13 to 17 ms).
    LOCKSTEP_SPIN_COUNT = 10_000

    @classmethod
    def lockstep_env(cls) -> dict[str, str]:
        if "TVM_THREAD_POOL_SPIN_COUNT" in os.environ:  # the user's own setting stands
            return {}
        return {"TVM_THREAD_POOL_SPIN_COUNT": str(cls.LOCKSTEP_SPIN_COUNT)}

    @classmethod
    def devices(cls) -> list[str]:
        from tvmbench.targets import query_gpu

        return ["cpu"] + (["cuda"] if query_gpu() is not None else [])

    def prepare(self, model: LoadedModel) -> None:
        t0 = time.perf_counter()
        import tvm  # noqa: F401  (timed: the framework's import)
        from tvm import relax  # noqa: F401

        self.phases_s["import_framework_s"] = time.perf_counter() - t0
        if model.family == "package":
            path, library, params, facts = self._from_package(model)
        else:
            path, library, params, facts = self._compile(model)
        self._bind(model, path, library, params)
        self.info = {"device": str(self.dev), "version": tvm.__version__, "target": self.config.target.config,
                     "threads": self._threads(), "library": str(path), **facts,
                     "pool_spin_count": os.environ.get("TVM_THREAD_POOL_SPIN_COUNT", "TVM's default")}
        rpc_options = self.options.rpc
        if self._remote is not None:
            self.info.update({"device": f"{self.dev} on the device registered as '{rpc_options['key']}' at "
                                        f"{rpc_options['tracker']}",
                              "remote": dict(rpc_options), "clock": "device (VM time_evaluator over RPC)"})
            from tvmbench.rpc import emulator_of

            emulated = emulator_of(self._remote)
            if emulated:
                self.info["remote"]["emulated"] = emulated
                self.info["clock"] = f"an emulator's ({emulated}): not the speed of a device"

    def _compile(self, model: LoadedModel) -> tuple[Any, Any, list[Any], dict[str, Any]]:
        """Import and compile (or take the cached library): (path, library, weights, facts)."""
        from tvmbench.compile import compile_model
        from tvmbench.compile.precision import import_at_precision
        from tvmbench.tuning.database import load_databases

        target = self.config.target
        precision = self.options.precision
        imported = import_at_precision(model, target, precision)
        self.imported = imported  # the Relax module as compiled (for the profiler's kernel facts)
        self.phases_s.update({f"{k}_s": v for k, v in imported.timings_s.items()})
        self.log(f"imported into Relax through {imported.frontend} ("
                 + ", ".join(f"{k} {v:.1f} s" for k, v in imported.timings_s.items()) + ")")
        self.schedules = load_databases(self.config.databases, target)  # what the profiler reports per kernel
        compiled = compile_model(imported, target, self.schedules, use_cache=self.config.use_cache,
                                 cuda_graph=self.options.cuda_graph, remote=bool(self.options.rpc), log=self.log)
        self.phases_s["compile_s"] = compiled.compile_s
        self.phases_s["load_library_s"] = compiled.load_s
        facts = {"frontend": imported.frontend, "precision": precision, "pipeline": compiled.pipeline,
                 "cache_hit": compiled.cache_hit, "cache_key": compiled.cache_key,
                 "database": compiled.database or None}
        if imported.route:
            facts["onnx_route"] = imported.route
        if compiled.warnings:
            facts["warnings"] = list(compiled.warnings)
        return compiled.path, compiled.library, list(imported.params), facts

    def _from_package(self, model: LoadedModel) -> tuple[Any, Any, list[Any], dict[str, Any]]:
        """A package written by ``export``: checked (digests, TVM version, machine class), its
        library loaded and its weights read; nothing compiled, no torch (models/package.py)."""
        import tvm

        from tvmbench.models import package

        folder = Path(model.details["package"])
        spec = package.read_spec(folder)
        package.verify(folder, spec, remote=bool(self.options.rpc))
        t0 = time.perf_counter()
        library = None if self.options.rpc else tvm.runtime.load_module(str(folder / package.LIBRARY))
        with np.load(folder / package.PARAMS, allow_pickle=False) as weights:
            params = [tvm.runtime.tensor(weights[f"arr_{i}"]) for i in range(len(weights.files))]
        self.phases_s["load_library_s"] = time.perf_counter() - t0
        facts = {"package": str(folder), "precision": spec.get("precision"), "built_for": spec["target"],
                 "built_with": {"tvm": spec.get("tvm_version"), "tvmbench": spec.get("tvmbench_version")},
                 "database": {"sources": spec.get("databases") or []},
                 "torch_loaded": sys.modules.get("torch") is not None}  # a package run needs no torch
        return folder / package.LIBRARY, library, params, facts

    def _bind(self, model: LoadedModel, path: Any, library: Any, params: list[Any]) -> None:
        """Load the library on the device (here, or uploaded over RPC), run the weight
        transforms once, and bind the arguments so each timed call is a bare call into the VM."""
        import tvm
        from tvm import relax

        target = self.config.target
        rpc_options = self.options.rpc
        t0 = time.perf_counter()
        self._remote = None
        if rpc_options:
            from tvmbench.rpc import connect

            self._remote = connect(rpc_options["tracker"], rpc_options["key"])
            self._remote.upload(str(path))
            library = self._remote.load_module(Path(path).name)
            self.dev = self._remote.cuda(0) if target.device == "cuda" else self._remote.cpu(0)
            self.phases_s["upload_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
        else:
            self.dev = tvm.cuda(0) if target.device == "cuda" else tvm.cpu(0)
        self.vm = relax.VirtualMachine(library, self.dev)
        self._host_inputs = list(model.inputs.values())
        self._to_device = tvm.runtime.tensor
        params = [tvm.runtime.tensor(p.numpy(), self.dev) if self._remote is not None
                  else p.copyto(self.dev) if target.device != "cpu" else p for p in params]
        self.phases_s["load_inputs_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self._params = transform_params(self.vm, params, stateful=self._remote is not None)
        self.phases_s["transform_params_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        args = [tvm.runtime.tensor(a, self.dev) for a in self._host_inputs] + self._params
        # Bind the arguments once: each timed call is then a bare call into the VM, with no
        # per-call conversion of ~100 Python arguments measured as model time.
        self.vm.save_function("main", "main_bound", *args)
        self._fn = self.vm["main_bound"]
        if self._remote is not None:  # RPC returns no tuples: outputs come one tensor at a time
            self.vm.set_input("main", *args)
            self._fn = lambda: self.vm.invoke_stateful("main")
        self._out: Any = None
        self.phases_s["bind_s"] = time.perf_counter() - t0

    def _threads(self) -> int | None:
        import tvm

        if self._remote is None:
            return int(tvm.runtime.num_threads())
        try:  # the device server's own setting (TVM_NUM_THREADS where it was started)
            return int(self._remote.get_function("runtime.NumThreads")())
        except Exception:
            return None

    def block_timer(self) -> Callable[[int], float] | None:
        """On a remote device, time ``k`` calls with the device's clock: the VM's time_evaluator
        runs them there, so the network round trip is not measured as model time."""
        if self._remote is None:
            return None

        def timed(k: int) -> float:
            return float(self.vm.time_evaluator("main_bound", self.dev, number=k, repeat=1)().mean)

        return timed

    def run(self) -> None:
        self._out = self._fn()
        self.dev.sync()

    def relax_module(self) -> Any:
        """The Relax module as it was compiled (after --precision), for the profiler's kernel facts."""
        return self.imported.mod

    def tuning_databases(self) -> list[Any]:
        """The MetaSchedule databases applied to this build (which kernels have a tuning record)."""
        return list(self.schedules.databases)

    def time_kernels(self, runs: int, sequence: list[list[tuple[str, float]]] | None = None,
                     paced: Paced | None = None) -> tuple[list[dict[str, float]], dict[str, int]]:
        """``runs`` inferences with every VM call timed (the device synchronised after each):
        seconds per kernel name for each run, and how often each kernel is called per run.
        ``sequence``, when given, receives each run's calls in order as (name, seconds); each
        inference is made through ``paced`` when given (``lockstep.Pacer``)."""
        per_run: list[dict[str, float]] = []
        calls: dict[str, int] = {}
        current: dict[str, float] = {}
        order: list[tuple[str, float]] = []
        started: dict[str, float] = {}
        dev = self.dev

        def instrument(func: Any, name: str, before_run: bool, ret_val: Any, *args: Any) -> int:
            if before_run:
                started[name] = time.perf_counter()
            else:
                dev.sync()
                took = time.perf_counter() - started.pop(name)
                current[name] = current.get(name, 0.0) + took
                order.append((name, took))
                if not per_run:
                    calls[name] = calls.get(name, 0) + 1
            return 0  # relax.VMInstrumentReturnKind.NO_OP

        self.vm.set_instrument(instrument)
        try:
            for _ in range(runs):
                current.clear()
                order.clear()
                (paced or unpaced)(self.run)
                per_run.append(dict(current))
                if sequence is not None:
                    sequence.append(list(order))
        finally:
            self.vm.set_instrument(None)  # later runs of this build are not instrumented
        return per_run, calls

    def run_with_io(self) -> None:
        args = [self._to_device(a, self.dev) for a in self._host_inputs]
        if self._remote is not None:
            self.vm.set_input("main", *args, *self._params)
            self.vm.invoke_stateful("main")
            out = self.vm.get_outputs("main")
        else:
            out = self._out = self.vm["main"](*args, *self._params)
        for t in _flatten_tvm(out):
            t.numpy()  # synchronises: the copy back waits for the computation

    def outputs(self) -> list[np.ndarray]:
        out = self.vm.get_outputs("main") if self._remote is not None else self._out
        return [t.numpy() for t in _flatten_tvm(out)]

    def close(self) -> None:
        self._remote = None
        self._fn = None
        self._params = []
        self.vm = None
        self._out = None


class TVMUntunedBackend(TVMBackend):
    """TVM with no tuning database at all (tvmbench's default schedules only), measured as a
    framework of its own so that tuned and untuned TVM sit side by side in one run, alternating
    with the peers like any other framework."""

    name = "tvm_untuned"
    result_key = "tvm_untuned"
    label = "TVM untuned"
    runs_packages = False  # a package's schedules are built in

    def prepare(self, model: LoadedModel) -> None:
        self.config = dataclasses.replace(self.config, databases=())
        super().prepare(model)
