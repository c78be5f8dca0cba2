"""vela compile and the Ethos-U evaluate (see backends.ethosu).

vela runs as a child process (`python -I -m ethosu.vela`), with --config/--system-config/--memory-mode
always explicit. Its figures come from the files it writes: `<net>_summary_<system>.csv` (cycles,
inference time, SRAM/flash use) and `<net>_per-layer.csv` (per-operator cycles and placement); the CPU
operators from its --show-cpu-operations listing.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from backends import profiles
from backends.catalog import Target
from backends.ethosu import ALLOWED, fingerprint
from backends.sdk import process
from backends.sdk.base import StageOutput, StageRequest
from backends.sdk.errors import TerminalError
from backends.sdk.vocab import estimated_by
from backends.tflite import fingerprint as tflite_fingerprint
from backends.tflite.stages import TfliteEvaluate, tflite_of

TIMEOUT_S = 1800.0
VELA_ESTIMATE = estimated_by("vela")
_OPS = re.compile(r"^(CPU|NPU) operators = (\d+)")
_CPU_OP = re.compile(r"^\s+CPU: (\S+) = (.*)$")


def vela_ini() -> Path:
    import ethosu

    return Path(ethosu.__path__[0]) / "config_files" / "Arm" / "vela.ini"


def settings(target: Target, compile_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """vela's configuration for the target; compile.options override the catalog's."""
    options: Mapping[str, Any] = compile_cfg.get("options") or {}
    level = int(compile_cfg.get("optimization_level", 3))
    out = {
        "accelerator_config": options.get("accelerator_config") or target.extra.get("vela_accelerator"),
        "system_config": options.get("system_config") or target.extra.get("vela_system_config"),
        "memory_mode": options.get("memory_mode") or target.extra.get("vela_memory_mode"),
        "optimise": options.get("optimise") or ("Size" if level == 0 else "Performance"),
    }
    missing = [k for k, v in out.items() if not v]
    if missing:
        raise TerminalError(f"ethos-u: target {target.id} names no vela {', '.join(missing)}")
    if options.get("arena_cache_size") is not None:
        out["arena_cache_size"] = int(options["arena_cache_size"])
    return out


def argv(model: Path, out: Path, config: Mapping[str, Any]) -> list[str]:
    args = [
        str(model),
        "--output-dir",
        str(out),
        "--config",
        str(vela_ini()),
        "--accelerator-config",
        str(config["accelerator_config"]),
        "--system-config",
        str(config["system_config"]),
        "--memory-mode",
        str(config["memory_mode"]),
        "--optimise",
        str(config["optimise"]),
        "--show-cpu-operations",
        "--verbose-performance",
    ]
    if "arena_cache_size" in config:
        args += ["--arena-cache-size", str(config["arena_cache_size"])]
    return process.python_argv("-m", "ethosu.vela", *args)


def parse_stdout(text: str) -> dict[str, Any]:
    """vela's placement: operator counts and the CPU operators it listed (type, name)."""
    counts = {"CPU": 0, "NPU": 0}
    cpu = []
    for line in text.splitlines():
        match = _OPS.match(line)
        if match:
            counts[match.group(1)] = int(match.group(2))
        op = _CPU_OP.match(line)
        if op:
            cpu.append({"op": op.group(1), "name": op.group(2).strip()})
    return {"npu_operators": counts["NPU"], "cpu_operators": counts["CPU"], "cpu": cpu}


def _number(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return 0.0


def read_summary(path: Path) -> dict[str, Any]:
    with path.open(newline="") as fh:
        row = next(csv.DictReader(fh))
    keys = (
        "cycles_total",
        "cycles_npu",
        "inference_time",
        "sram_memory_used",
        "off_chip_flash_memory_used",
        "dram_memory_used",
        "on_chip_flash_memory_used",
        "nn_macs",
        "core_clock",
    )
    return {k: _number(row.get(k, "")) for k in keys} | {"accelerator": row.get("accelerator_configuration")}


def read_per_layer(path: Path) -> list[dict[str, Any]]:
    with path.open(newline="") as fh:
        return [
            {
                "op": row.get("NNG Operator", ""),
                "target": row.get("Target", ""),
                "cycles": int(_number(row.get("Op Cycles", "0"))),
                "macs": int(_number(row.get("MAC Count", "0"))),
                "name": row.get("Name", ""),
            }
            for row in csv.DictReader(fh)
        ]


class VelaCompile:
    """Stage "compile": the TFLite through vela for the target's Ethos-U configuration."""

    stage = "compile"

    def fingerprint(self) -> dict[str, str]:
        return {**fingerprint(), **tflite_fingerprint()}

    def run(self, request: StageRequest) -> StageOutput:
        tflite, io_path, converted = tflite_of(request, ALLOWED)
        config = settings(request.target, request.config.get("compile") or {})
        out = request.workdir / "vela"
        cmd = argv(tflite, out, config)
        request.log.parent.mkdir(parents=True, exist_ok=True)
        proc = process.run(cmd, "vela", TIMEOUT_S, cwd=process.NEUTRAL_CWD)
        with request.log.open("a") as fh:
            fh.write("$ " + " ".join(cmd) + "\n" + proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise TerminalError(
                f"vela failed (exit {proc.returncode}): {vela_error(proc.stderr or proc.stdout)}"
            )
        stem = tflite.stem
        optimised = out / f"{stem}_vela.tflite"
        summary_csv = out / f"{stem}_summary_{config['system_config']}.csv"
        layers_csv = out / f"{stem}_per-layer.csv"
        if not optimised.is_file() or not summary_csv.is_file():
            raise TerminalError("vela wrote no optimised model or summary")
        summary = read_summary(summary_csv)
        placement = parse_stdout(proc.stdout) | {"source": f"vela {fingerprint()['ethos_u_vela']}"}
        # layers the spec kept in float: float32 TFLite ops, which vela leaves to the Cortex-M CPU
        placement["kept_float"] = list(json.loads(io_path.read_text()).get("kept_float") or [])
        layers = read_per_layer(layers_csv) if layers_csv.is_file() else []
        record = {
            "format_version": 1,
            "settings": config,
            "summary": summary,
            "placement": placement,
            "per_layer": layers,
        }
        report_path = request.workdir / "vela.json"
        report_path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        vela_model = request.workdir / "model_vela.tflite"
        shutil.copyfile(optimised, vela_model)
        shutil.copyfile(layers_csv, request.workdir / "per-layer.csv")
        shutil.rmtree(out)
        total = placement["npu_operators"] + placement["cpu_operators"]
        report = {
            "settings": config,
            "summary": summary,
            "placement": {k: v for k, v in placement.items()},
            "converted_here": converted is not None,
        }
        note = (
            f"vela {config['accelerator_config']}: {placement['npu_operators']}/{total} operators on the NPU, "
            f"{int(summary['cycles_total'])} cycles, {summary['inference_time'] * 1000:.3f} ms estimated, "
            f"SRAM {summary['sram_memory_used']:.1f} KiB"
        )
        report["measurements"] = vela_measurements(record, vela_model.stat().st_size)
        return StageOutput(
            artifacts={
                "vela_model": vela_model,
                "vela_report": report_path,
                "vela_per_layer": request.workdir / "per-layer.csv",
                "tflite": tflite,
                "tflite_io": io_path,
            },
            report=report,
            note=note,
        )


def vela_measurements(record: Mapping[str, Any], size_bytes: int) -> dict[str, dict[str, Any]]:
    """vela's figures as measurements: estimates from its performance model, named as such."""
    summary, config, placement = record["summary"], record["settings"], record["placement"]
    where = (
        f"vela {placement['source'].split()[-1]} {config['accelerator_config']}, {config['system_config']}"
    )
    ms = summary["inference_time"] * 1000.0
    out: dict[str, dict[str, Any]] = {
        f"latency_ms.{p}": {
            "value": round(ms, 6),
            "evidence": VELA_ESTIMATE,
            "detail": f"{where}: {int(summary['cycles_total'])} cycles at {summary['core_clock'] / 1e6:g} MHz "
            f"(vela's performance model; the same for every percentile){_cpu_note(placement)}",
        }
        for p in ("estimate", "p50", "p90", "p95", "p99")
    }
    out["fallback_partitions"] = _fallback_partitions(record)
    out["npu_cycles"] = {
        "value": int(summary["cycles_total"]),
        "evidence": VELA_ESTIMATE,
        "detail": f"{where}: total cycles per inference (NPU {int(summary['cycles_npu'])})",
    }
    kib = 1024 / 1e6
    out["peak_memory_mb"] = {
        "value": round(summary["sram_memory_used"] * kib, 6),
        "evidence": VELA_ESTIMATE,
        "detail": f"{where}: SRAM used {summary['sram_memory_used']:g} KiB (feature maps and cached weights); "
        f"off-chip flash {summary['off_chip_flash_memory_used']:g} KiB, DRAM {summary['dram_memory_used']:g} KiB",
    }
    total = placement["npu_operators"] + placement["cpu_operators"]
    out["npu_coverage"] = {
        "value": round(placement["npu_operators"] / total, 6) if total else 0.0,
        "evidence": VELA_ESTIMATE,
        "detail": f"{where}: {placement['npu_operators']}/{total} TFLite operators placed on the NPU by the compiler "
        f"({placement['cpu_operators']} left to the CPU){_kept_note(placement)}",
    }
    out["size_mb"] = {
        "value": round(size_bytes / 1e6, 6),
        "evidence": "measured:host",
        "detail": "vela-optimised .tflite bytes (what is flashed)",
    }
    return out


def _fallback_partitions(record: Mapping[str, Any]) -> dict[str, Any]:
    """Runs of consecutive CPU operators in vela's per-layer table (its execution order)."""
    placement, rows = record["placement"], record.get("per_layer") or []
    runs, previous = 0, "NPU"
    for row in rows:
        target = "CPU" if str(row.get("target", "")).upper().startswith("CPU") else "NPU"
        runs += target == "CPU" and previous != "CPU"
        previous = target
    if not placement["cpu_operators"]:
        runs = 0
    elif not runs:
        return {
            "value": None,
            "evidence": VELA_ESTIMATE,
            "detail": f"vela left {placement['cpu_operators']} operator(s) to the CPU; its per-layer table "
            "does not say in which order, so the partitions are not counted",
        }
    return {
        "value": runs,
        "evidence": VELA_ESTIMATE,
        "detail": f"runs of operators vela leaves to the CPU, in its per-layer order "
        f"({placement['cpu_operators']} CPU operator(s))",
    }


def _kept_note(placement: Mapping[str, Any]) -> str:
    kept = placement.get("kept_float") or []
    if not kept:
        return ""
    return f"; kept float by quantization.sensitive_layers, on the Cortex-M CPU: {', '.join(kept)}"


def _cpu_note(placement: Mapping[str, Any]) -> str:
    """vela models the NPU only: the operators it leaves to the CPU add time it does not estimate."""
    if not placement.get("cpu_operators"):
        return ""
    return (
        f"; NPU only: the {placement['cpu_operators']} operator(s) left to the CPU are not in this "
        f"estimate{_kept_note(placement)}"
    )


class VelaEvaluate(TfliteEvaluate):
    """LiteRT accuracy of the int8 TFLite on this host, and vela's estimates for time and memory."""

    def fingerprint(self) -> dict[str, str]:
        return {**fingerprint(), **tflite_fingerprint()}

    def run(self, request: StageRequest) -> StageOutput:
        report_file, vela_model = request.inputs.get("vela_report"), request.inputs.get("vela_model")
        if report_file is None or vela_model is None:
            raise TerminalError("ethos-u evaluate needs compile's vela_model and vela_report")
        _, found, report = self.measure(request)
        record = json.loads(Path(report_file).read_text())
        found.update(vela_measurements(record, Path(vela_model).stat().st_size))
        report["vela"] = {"summary": record["summary"], "placement": record["placement"]}
        artifacts = {}
        profile = vela_profile(record, request)
        if profile is not None:
            artifacts["profile"] = profiles.write(profile, request.workdir / "profile.json")
            report["profile"] = profiles.summary(profile)
        accuracy = report["accuracy"]
        note = (
            f"LiteRT {accuracy['metric']} {accuracy['accuracy']:.4f} (float {accuracy['reference']:.4f}); "
            f"vela {found['latency_ms.p50']['value']:.3f} ms estimated"
        )
        return StageOutput(artifacts=artifacts, report={**report, "measurements": found}, note=note)


def vela_profile(record: Mapping[str, Any], request: StageRequest) -> dict[str, Any] | None:
    """vela's per-layer cycles as a profile (backends.profiles), or None when it wrote no per-layer table."""
    import onnx

    from backends.profiles.cycles import layers_from_cycles

    rows, summary = record.get("per_layer") or [], record.get("summary") or {}
    if not rows or not summary.get("core_clock"):
        return None
    model = request.inputs.get("model")
    try:  # the quantize output may be the converter's bundle, not an ONNX: then layers stay unmapped
        deployed = onnx.load(str(model), load_external_data=False) if model is not None else None
    except Exception:  # onnx raises protobuf's DecodeError (or others) on a non-ONNX file
        deployed = None
    source = str((record.get("placement") or {}).get("source", "vela"))
    layers = layers_from_cycles(rows, float(summary["core_clock"]), deployed)
    return profiles.build(
        runtime=source,
        evidence=VELA_ESTIMATE,
        how=f"{source}'s performance model, per operator (nothing ran): cycles at "
        f"{float(summary['core_clock']) / 1e6:g} MHz",
        layers=layers,
        runs=[],
        timed_p50_ms=None,
        target=request.target,
        device_evidence="estimated: vela's placement of each operator",
    )


_VELA_ERROR = re.compile(r"Compilation failed: Error: (.*)$")


def vela_error(output: str) -> str:
    """Vela's own reason, one line: the operator its compiler refused and the rule it broke ("SOFTMAX
    'name' Does not have valid TFLite Semantics: (IFM Scale / OFM Scale)=inf"), else its last line
    (often only "Failed to parse TFLite file", which names nothing)."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    for k, line in enumerate(lines):
        found = _VELA_ERROR.search(line)
        if found:
            detail = [
                d.lstrip("- ").strip()
                for d in lines[k + 1 : k + 4]
                if not d.lower().startswith(("failed", "traceback"))
            ]
            return "; ".join([found.group(1).strip(), *detail])[:400]
    return (lines[-1] if lines else "")[:300]
