"""model.py for Triton's Python backend: one file for every workbench target and framework.

Upstream gen_triton_model.py wrote eight string-templated variants (pytorch/tensorflow x inf1/inf2 x
batched/per-request) that differed in more than the loader. Here the request handling is shared and
only a small loader seam (one function per target/framework) differs, so batching, error isolation
and core placement behave the same everywhere.

The file is copied as-is into ``<model>/1/model.py`` and must run in a Triton container where the
workbench package is not installed: it imports only the standard library, numpy and
triton_python_backend_utils at the top; torch, tensorflow and the Neuron SDK are imported inside the
seam, after ``NEURON_RT_VISIBLE_CORES`` is set (the runtime reads it once, when it starts).

Parameters (config.pbtxt ``parameters``, all strings):

* ``COMPILED_MODEL``: a path relative to the model's own folder, or absolute. In a directory
  written by upstream (no ``WORKBENCH_TARGET``) whose target is inf1, a relative path keeps
  upstream's meaning: relative to the server's working directory (upstream's inf1 variants opened
  it as written; only its ``--inf2`` variants joined it with the model folder).
* ``NEURON_CORE_START_INDEX`` / ``NEURON_CORE_END_INDEX`` (default 0:0): the core range split over
  the instances exactly like ``workbench/coremap.py``.
* ``NUM_THREADS_PER_CORE``: on Inf1/Inf2/Trn1, DataParallel's ``num_workers`` becomes cores x this
  value; absent or empty leaves the SDK's default, which the docs give as 2 x the cores but the only
  public torch-neuronx source (1.13.1.1.12.0, data_parallel.py ``_load_modules``) sets to 2 x the
  loaded modules, i.e. 2 for the consecutive ids model.py passes: set it to use more workers. In an
  upstream directory ``"1"`` is gen_triton_model.py's default, written whether asked or not, so it
  counts as absent. TensorFlow on Neuron serves with cores x (this or 1) threads; on the cpu target
  the instance runs cores x (this or 1) threads.
* ``WORKBENCH_TARGET`` (cpu, inf1, inf2, trn1, trn2, trn3) and ``WORKBENCH_FRAMEWORK`` (pytorch,
  tensorflow, transformers_neuronx). Directories written by upstream have neither; then the
  framework is tensorflow when COMPILED_MODEL is a SavedModel folder (saved_model.pb inside), else
  pytorch, and the target is what upstream's variants imported: for torch_neuronx, inf2 when its
  installed version is the PyTorch/XLA library and trn2 when it is TorchNeuron (2.13/2.14), else inf1
  when torch_neuron (tensorflow-neuron, or tensorflow_neuronx: inf2) is importable, else cpu.
* trn2/trn3 serve through TorchNeuron (from Neuron 2.34 the PyTorch/XLA trace is not supported for
  inference there): COMPILED_MODEL is a ``torch.export`` program, moved to the ``neuron`` device and
  wrapped in ``torch.compile(backend="neuron", fullgraph=True, dynamic=False)``; each new batch size
  compiles once on its first request. TorchNeuron has no DataParallel, so each instance owns one
  NeuronCore. The installed torch-neuronx must be the library the target needs (TorchNeuron for
  trn2/trn3, PyTorch/XLA for inf2/trn1), checked before anything loads. inf1 (torch-neuron) and
  TensorFlow are out of support in the SDK (last working stacks: Neuron 2.32.0 manifest, 2.28.1)
  and kept as the seed's workflow.
* ``BATCH_REQUESTS`` (default true): false runs one forward per request (upstream's
  ``--disable_batch_requests_to_neuron``).
* ``CPU_AFFINITY`` (default false): cpu target only; pin each instance to its cores.
* ``TF_SIGNATURE_DEF_KEY`` (default serving_default): the SavedModel signature to call.
* ``TNX_MODEL_CLASS``, ``TNX_BATCH_SIZE``, ``TNX_TP_DEGREE``, ``TNX_N_POSITIONS``, ``TNX_AMP``,
  ``TNX_UNROLL``, ``TNX_SEQUENCE_LENGTH``: transformers-neuronx sampling settings (class default:
  the SDK's class for the checkpoint's model_type, else LlamaForSampling);
  ``TNX_COMPILED_DIR`` (optional, relative to the model folder): graphs saved with ``.save()``,
  loaded before ``to_neuron()`` so the model is not recompiled at every load. Generation is greedy
  and follows the class: Llama/Mistral/Mixtral stop once every row has produced EOS (rows that
  ended earlier are filled with the first EOS id, so all rows of a batch have one width); the
  other classes never sample EOS and always return TNX_SEQUENCE_LENGTH tokens. The CPU path
  computes the same function with transformers.
"""

import gc
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import triton_python_backend_utils as pb_utils

# These tables repeat workbench/system.py, workbench/compiler/tnx.py and workbench/generate/settings.py
# (test_python_model.py keeps them equal):
# model.py runs where the workbench is not installed.
TARGETS = ("cpu", "inf1", "inf2", "trn1", "trn2", "trn3")
FRAMEWORKS = ("pytorch", "tensorflow", "transformers_neuronx")
NEURON_TARGETS = ("inf1", "inf2", "trn1", "trn2", "trn3")
XLA_TARGETS = ("inf2", "trn1")  # PyTorch/XLA torch-neuronx: trace + DataParallel
TORCHNEURON_TARGETS = ("trn2", "trn3")  # TorchNeuron: torch.compile(backend="neuron")
FRAMEWORK_TARGETS = {
    "pytorch": TARGETS,
    "tensorflow": ("cpu", "inf1", "inf2", "trn1"),
    "transformers_neuronx": ("cpu", "inf2", "trn1"),
}
# Unset or empty TNX_TP_DEGREE: the instance's cores; TNX_UNROLL: transformers-neuronx's default;
# TNX_SEQUENCE_LENGTH: TNX_N_POSITIONS; TNX_MODEL_CLASS: SAMPLING_CLASSES[model_type].
TNX_DEFAULTS = {
    "TNX_MODEL_CLASS": "LlamaForSampling",
    "TNX_BATCH_SIZE": "1",
    "TNX_N_POSITIONS": "2048",
    "TNX_AMP": "f32",
}
TNX_AMPS = ("f32", "f16", "bf16")
SAMPLING_CLASSES = {
    "bloom": "BloomForSampling",
    "code_llama": "LlamaForSampling",
    "gpt2": "GPT2ForSamplingWithContextBroadcasting",
    "gpt_neox": "GPTNeoXForSampling",
    "gptj": "GPTJForSampling",
    "llama": "LlamaForSampling",
    "mistral": "MistralForSampling",
    "mixtral": "MixtralForSampling",
    "opt": "OPTForSampling",
}
STOPS_AT_EOS = ("LlamaForSampling", "MistralForSampling", "MixtralForSampling")
NOT_SERIALIZABLE = ("GPTJForSampling", "GPTNeoXForSampling")


class SettingsError(ValueError):
    """A config.pbtxt value model.py cannot serve; initialize() re-raises it as TritonModelException."""


# --- core split: must equal workbench/coremap.py split_cores (a test checks many ranges) ----------


def split_cores(start, end, instances=1, threads_per_core=1):
    """Split cores start..end (inclusive) over ``instances``: returns (cores per instance, threads per
    instance). Instance k owns cores start + k*cpi .. start + (k+1)*cpi - 1; leftovers stay idle."""
    if start < 0 or end < 0:
        raise SettingsError(f"core range {start}:{end} has a negative core index")
    if end < start:
        raise SettingsError(f"core range {start}:{end} is reversed: the end must be >= the start")
    if instances < 1:
        raise SettingsError(f"instance count must be >= 1, got {instances}")
    if threads_per_core < 1:
        raise SettingsError(f"threads per core must be >= 1, got {threads_per_core}")
    total = end - start + 1
    if instances > total:
        raise SettingsError(f"cannot give {instances} instances a core each from {total} core(s) in {start}:{end}")
    cores_per_instance = total // instances
    return cores_per_instance, cores_per_instance * threads_per_core


def instance_cores(start, cores_per_instance, instance):
    first = start + instance * cores_per_instance
    return list(range(first, first + cores_per_instance))


def visible_cores(cores):
    """NEURON_RT_VISIBLE_CORES value: "4-7", or "2" for a single core."""
    return str(cores[0]) if len(cores) == 1 else f"{cores[0]}-{cores[-1]}"


# --- settings ---------------------------------------------------------------------------------------


def _flag(params, key, default):
    """Upstream-style values: empty or absent means the default."""
    value = params.get(key, "").strip().lower() or default
    if value not in ("true", "false"):
        raise SettingsError(f'parameter {key} = {params[key]!r} must be "true" or "false"')
    return value == "true"


def _int(params, key, default):
    value = params.get(key, "").strip() or default
    try:
        return int(value)
    except ValueError:
        raise SettingsError(f"parameter {key} = {value!r} is not an integer") from None


def _importable(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def torch_neuronx_version():
    """The installed torch-neuronx version from its metadata (None when absent), read without
    importing it: the runtime reads NEURON_RT_VISIBLE_CORES once, at import."""
    try:
        return importlib.metadata.version("torch-neuronx")
    except importlib.metadata.PackageNotFoundError:
        return None


def is_torchneuron(version):
    """torch-neuronx for PyTorch 2.13/2.14 (2.10 on) is TorchNeuron, the native backend; earlier
    versions are the PyTorch/XLA library (same rule as workbench/system.py torch_neuronx_line)."""
    parts = re.findall(r"\d+", version.split("+", 1)[0])[:2]
    return len(parts) == 2 and (int(parts[0]), int(parts[1])) >= (2, 10)


def check_torch_neuronx(target, version):
    """SettingsError when the installed torch-neuronx is the other library of that name."""
    if version is None or target not in XLA_TARGETS + TORCHNEURON_TARGETS:
        return
    if target in XLA_TARGETS and is_torchneuron(version):
        raise SettingsError(
            f"target {target}: the installed torch-neuronx {version} is TorchNeuron, the native PyTorch backend for "
            f"Trn2/Trn3 only, which has no torch_neuronx.trace or DataParallel; {target} needs the PyTorch/XLA "
            "library: pip install torch-neuronx==2.9.0.2.15.32035 (Neuron pip repository)"
        )
    if target in TORCHNEURON_TARGETS and not is_torchneuron(version):
        raise SettingsError(
            f"target {target}: the installed torch-neuronx {version} is the PyTorch/XLA library, which Neuron no longer "
            f"supports for inference on Trn2/Trn3 from 2.34.0; install TorchNeuron: pip install "
            "torch-neuronx==2.14.3.1 (Neuron pip repository)"
        )


def _infer_target(framework):
    """Upstream directories carry no target: use the SDK that is installed, as its variants did."""
    if framework == "tensorflow":
        if _importable("tensorflow_neuronx"):
            return "inf2"
        try:
            importlib.metadata.distribution("tensorflow-neuron")
            return "inf1"
        except importlib.metadata.PackageNotFoundError:
            return "cpu"
    if _importable("torch_neuronx"):
        version = torch_neuronx_version()
        return "trn2" if version is not None and is_torchneuron(version) else "inf2"
    if _importable("torch_neuron"):
        return "inf1"
    return "cpu"


def instance_index(instance_name, count):
    """Triton names instances ``<group>_<k>``; upstream parsed k the same way."""
    match = re.search(r"_(\d+)$", instance_name or "")
    if match is None:
        if count == 1:
            return 0
        raise SettingsError(f"instance name {instance_name!r} does not end in _<index>; cannot pick its cores")
    index = int(match.group(1))
    if index >= count:
        raise SettingsError(f"instance name {instance_name!r} gives index {index}, but instance_group count is {count}")
    return index


def _threads_per_core(params, upstream):
    """NUM_THREADS_PER_CORE as asked, or None: absent/empty, or upstream's always-written "1"."""
    value = params.get("NUM_THREADS_PER_CORE", "").strip()
    if not value or (upstream and value == "1"):
        return None
    return _int(params, "NUM_THREADS_PER_CORE", "1")


def _compiled_path(compiled, model_dir, cwd_relative):
    """Where COMPILED_MODEL points; an absolute path stays as written."""
    base = os.getcwd() if cwd_relative else model_dir
    return os.path.normpath(os.path.join(base, compiled))


def read_settings(model_config, model_dir, instance_name):
    """Everything initialize() needs, validated, as a dict; SettingsError names the bad item."""
    params = {key: value.get("string_value", "") for key, value in model_config.get("parameters", {}).items()}
    groups = model_config.get("instance_group", [])
    if len(groups) > 1:
        raise SettingsError(f"{len(groups)} instance_group blocks; model.py splits its core range over exactly one")
    count = int(groups[0].get("count", 1)) if groups else 1

    compiled = params.get("COMPILED_MODEL", "").strip()
    if not compiled:
        raise SettingsError("parameter COMPILED_MODEL is missing or empty; give the compiled model's path")
    upstream = not params.get("WORKBENCH_TARGET", "").strip()
    framework = params.get("WORKBENCH_FRAMEWORK", "").strip()
    if not framework:
        candidates = [_compiled_path(compiled, model_dir, cwd) for cwd in ((False, True) if upstream else (False,))]
        is_saved_model = any(os.path.isfile(os.path.join(c, "saved_model.pb")) for c in candidates)
        framework = "tensorflow" if is_saved_model else "pytorch"
    if framework not in FRAMEWORKS:
        raise SettingsError(f"parameter WORKBENCH_FRAMEWORK = {framework!r} is not one of {', '.join(FRAMEWORKS)}")
    target = params.get("WORKBENCH_TARGET", "").strip() or _infer_target(framework)
    if target not in TARGETS:
        raise SettingsError(f"parameter WORKBENCH_TARGET = {target!r} is not one of {', '.join(TARGETS)}")
    if target not in FRAMEWORK_TARGETS[framework]:
        allowed = "/".join(t for t in FRAMEWORK_TARGETS[framework] if t != "cpu")
        raise SettingsError(f"{framework} runs on {allowed} (or cpu), not {target}")
    if framework == "pytorch":
        check_torch_neuronx(target, torch_neuronx_version())
    cwd_relative = upstream and target == "inf1"  # upstream's inf1 variants opened the path as written
    path = _compiled_path(compiled, model_dir, cwd_relative)
    if not os.path.exists(path):
        base = "the server's working directory (upstream inf1 meaning)" if cwd_relative else "the model folder"
        hint = "" if os.path.isabs(compiled) else f"; relative paths are resolved against {base}"
        raise SettingsError(f"COMPILED_MODEL {compiled!r} not found (looked at {path}{hint})")

    start = _int(params, "NEURON_CORE_START_INDEX", "0")
    end = _int(params, "NEURON_CORE_END_INDEX", str(start))
    threads_per_core = _threads_per_core(params, upstream)
    cores_per_instance, threads = split_cores(start, end, count, threads_per_core or 1)
    index = instance_index(instance_name, count)
    if framework == "pytorch" and target in TORCHNEURON_TARGETS and cores_per_instance > 1:
        raise SettingsError(
            f"target {target} serves through TorchNeuron, which has no DataParallel (its API reference lists the "
            f"operator table and the torch.compile backend only), so an instance uses one NeuronCore; the range "
            f"{start}:{end} over {count} instance(s) gives each {cores_per_instance}: set the instance count to "
            f"{end - start + 1}"
        )
    settings = {
        "path": path,
        "compiled_model": compiled,
        "framework": framework,
        "target": target,
        "instance": index,
        "count": count,
        "cores": instance_cores(start, cores_per_instance, index),
        "threads": threads,
        # DataParallel workers: None leaves the SDK's default (see NUM_THREADS_PER_CORE above)
        "num_workers": None if threads_per_core is None else threads,
        "batch_requests": _flag(params, "BATCH_REQUESTS", "true"),
        "cpu_affinity": _flag(params, "CPU_AFFINITY", "false"),
        "signature": params.get("TF_SIGNATURE_DEF_KEY", "").strip() or "serving_default",
    }
    if framework == "transformers_neuronx":
        settings["tnx"] = tnx = _tnx_settings(params, cores_per_instance, target, path)
        if tnx["compiled_dir"] is not None:
            if tnx["model_class"] in NOT_SERIALIZABLE:
                raise SettingsError(
                    f"TNX_COMPILED_DIR is set, but {tnx['model_class']} cannot load saved graphs "
                    "(transformers-neuronx has no save/load for it); leave TNX_COMPILED_DIR out"
                )
            tnx["compiled_dir"] = os.path.normpath(os.path.join(model_dir, tnx["compiled_dir"]))
            if not os.path.isdir(tnx["compiled_dir"]):
                raise SettingsError(
                    f"TNX_COMPILED_DIR {params['TNX_COMPILED_DIR']!r} is not a folder ({tnx['compiled_dir']})"
                )
    return settings


def _checkpoint_config(path):
    """The checkpoint's config.json as a dict ({} when there is none)."""
    try:
        with open(os.path.join(path, "config.json")) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def _tnx_settings(params, cores_per_instance, target, path):
    config = _checkpoint_config(path)
    eos = config.get("eos_token_id")
    tnx = {
        "model_class": params.get("TNX_MODEL_CLASS", "").strip()
        or SAMPLING_CLASSES.get(config.get("model_type"), TNX_DEFAULTS["TNX_MODEL_CLASS"]),
        "batch_size": _int(params, "TNX_BATCH_SIZE", TNX_DEFAULTS["TNX_BATCH_SIZE"]),
        "tp_degree": _int(params, "TNX_TP_DEGREE", str(cores_per_instance)),
        "n_positions": _int(params, "TNX_N_POSITIONS", TNX_DEFAULTS["TNX_N_POSITIONS"]),
        "amp": params.get("TNX_AMP", "").strip() or TNX_DEFAULTS["TNX_AMP"],
        "unroll": _int(params, "TNX_UNROLL", "0") or None,
        "compiled_dir": params.get("TNX_COMPILED_DIR", "").strip() or None,
        # the checkpoint's EOS ids (int or list in config.json); [] when it declares none
        "eos_token_ids": [] if eos is None else ([int(eos)] if isinstance(eos, int) else [int(e) for e in eos]),
    }
    tnx["stops_at_eos"] = tnx["model_class"] in STOPS_AT_EOS
    tnx["sequence_length"] = _int(params, "TNX_SEQUENCE_LENGTH", str(tnx["n_positions"]))
    for key in ("batch_size", "tp_degree", "n_positions", "sequence_length"):
        if tnx[key] < 1:
            raise SettingsError(f"parameter TNX_{key.upper()} = {tnx[key]} must be at least 1")
    if tnx["sequence_length"] > tnx["n_positions"]:
        raise SettingsError(
            f"parameter TNX_SEQUENCE_LENGTH = {tnx['sequence_length']} exceeds TNX_N_POSITIONS = {tnx['n_positions']}"
        )
    if tnx["amp"] not in TNX_AMPS:
        raise SettingsError(f"parameter TNX_AMP = {tnx['amp']!r} is not one of {', '.join(TNX_AMPS)}")
    if target in NEURON_TARGETS and tnx["tp_degree"] > cores_per_instance:
        raise SettingsError(
            f"parameter TNX_TP_DEGREE = {tnx['tp_degree']} needs more cores than the {cores_per_instance} "
            "each instance owns; widen the core range or use fewer instances"
        )
    return tnx


# --- request reading: the same code in templates/pytorch_runtime.py (tests/test_request_handling.py
# holds the two copies equal, and tensor_index to workbench/spec.py's rule) --------------------------


class RequestError(ValueError):
    """One request that cannot be served; only that request's response carries the error."""


def tensor_index(name):
    """The i of a NAME__i tensor name, else None: split at the first "__", the rest ASCII digits."""
    _, sep, digits = name.partition("__")
    return int(digits) if sep and digits and digits.isascii() and digits.isdigit() else None


def tensor_entry(entry, max_batch_size):
    """A config input or output as requests are checked against it: name, numpy dtype, the dims a
    request carries (the batch dim first when max_batch_size > 0; a reshape replaces the dims, as
    Triton reshapes before the backend sees the tensor) and whether it may be absent."""
    shape = entry["reshape"].get("shape", []) if "reshape" in entry else entry.get("dims", [])
    return {
        "name": entry["name"],
        "dtype": np.dtype(pb_utils.triton_string_to_numpy(entry["data_type"])),
        "dims": ([-1] if max_batch_size > 0 else []) + [int(d) for d in shape],
        "optional": bool(entry.get("optional", False)),
    }


def read_request(request, inputs, batched):
    """The request's arrays for ``inputs`` (tensor_entry dicts), in that order, None for an absent
    optional one; with ``batched`` every input must have the same dim 0. RequestError names the bad input."""
    arrays: list = []  # numpy arrays, None for an absent optional input
    rows = {}
    for spec in inputs:
        tensor = pb_utils.get_input_tensor_by_name(request, spec["name"])
        if tensor is None:
            if spec["optional"]:
                arrays.append(None)
                continue
            raise RequestError(f"input {spec['name']!r} is missing")
        array = tensor.as_numpy()
        if array.dtype != spec["dtype"]:
            raise RequestError(f"input {spec['name']!r} has dtype {array.dtype}, expected {spec['dtype']}")
        dims = spec["dims"]
        if len(array.shape) != len(dims) or any(d != -1 and d != s for d, s in zip(dims, array.shape)):
            raise RequestError(f"input {spec['name']!r} has shape {list(array.shape)}, expected {dims}")
        if batched:
            rows[spec["name"]] = array.shape[0]
        arrays.append(array)
    if len(set(rows.values())) > 1:
        detail = ", ".join(f"{name} has {count}" for name, count in rows.items())
        raise RequestError(f"inputs disagree on the batch size (dim 0): {detail}")
    return arrays


def error_response(message):
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))


# --- tensor layout ----------------------------------------------------------------------------------


def _by_index(entries, kind):
    """PyTorch passes tensors by position: the ``__i`` suffix, not the config order, is the position."""
    indices = [tensor_index(entry["name"]) for entry in entries]
    for entry, index in zip(entries, indices):
        if index is None:
            raise SettingsError(
                f"{kind} {entry['name']!r}: PyTorch models need names of the form NAME__i "
                f"(e.g. {kind.upper()}__0) so the index gives the argument position"
            )
    if sorted(indices) != list(range(len(indices))):
        raise SettingsError(f"{kind} indices {sorted(indices)} must cover 0..{len(indices) - 1} with no gap or repeat")
    return [entry for _, entry in sorted(zip(indices, entries), key=lambda pair: pair[0])]


class Layout:
    """The config's tensors in the order the loaded model takes and returns them, and whether dim 0 is
    a batch dim that requests may be concatenated along."""

    def __init__(self, model_config, framework):
        inputs, outputs = model_config.get("input", []), model_config.get("output", [])
        if not inputs or not outputs:
            raise SettingsError("the config needs at least one input and one output")
        if framework == "pytorch":
            inputs, outputs = _by_index(inputs, "input"), _by_index(outputs, "output")
        for entry in inputs + outputs:
            if entry["data_type"] in ("TYPE_STRING", "TYPE_BF16"):
                raise SettingsError(
                    f"{entry['name']!r}: {entry['data_type']} tensors are not supported by this model.py"
                )
        self.max_batch_size = int(model_config.get("max_batch_size", 0))
        self.inputs = [tensor_entry(entry, self.max_batch_size) for entry in inputs]
        self.outputs = [tensor_entry(entry, self.max_batch_size) for entry in outputs]
        # With max_batch_size 0, dim 0 is a batch only if every tensor declares it variable and has more
        # dims (e.g. [-1, 4]); otherwise concatenating requests would change the shape the model sees.
        self.batched = self.max_batch_size > 0 or all(
            len(t["dims"]) >= 2 and t["dims"][0] == -1 for t in self.inputs + self.outputs
        )

    def read(self, request):
        """The request's inputs in model order, checked against the config (`read_request`)."""
        return read_request(request, self.inputs, self.batched)

    def response(self, results):
        if len(results) != len(self.outputs):
            raise RequestError(f"the model returned {len(results)} output(s), the config declares {len(self.outputs)}")
        tensors = [
            pb_utils.Tensor(spec["name"], np.ascontiguousarray(np.asarray(result).astype(spec["dtype"], copy=False)))
            for spec, result in zip(self.outputs, results)
        ]
        return pb_utils.InferenceResponse(output_tensors=tensors)


def _log(message, warning=False):
    """Into Triton's log (pb_utils.Logger exists only inside the stub)."""
    logger = getattr(pb_utils, "Logger", None)
    if logger is None:
        print(message, flush=True)
    elif warning:
        logger.log_warn(message)
    else:
        logger.log_info(message)


# --- loader seam: each returns run(list of arrays in model order) -> list of arrays in output order ---


def _pin_neuron_cores(settings):
    """The runtime claims every core unless told otherwise; it reads this once, when it starts."""
    os.environ["NEURON_RT_VISIBLE_CORES"] = visible_cores(settings["cores"])
    os.environ.pop("NEURON_RT_NUM_CORES", None)  # VISIBLE_CORES wins anyway; avoid a misleading value


def _pin_cpu_cores(settings):
    """Pin the calling thread, the one that loads and runs the model, to the instance's cores.

    Called before torch starts its intra-op thread pool, whose threads then inherit the affinity.
    Only this thread: the stub's own threads (its health check and the IPC with tritonserver) stay
    where they were, because pinned to a busy core they can miss the 1 s health check during
    initialize, and Triton r24.10 then waits for that stub forever (StubLauncher::Launch).
    On Linux, sched_setaffinity(0, ...) sets the calling thread only."""
    allowed = os.sched_getaffinity(0)
    wanted = [core for core in settings["cores"] if core in allowed]
    skipped = [core for core in settings["cores"] if core not in allowed]
    if skipped:
        _log(
            f"workbench instance {settings['instance']}: CPU core(s) {skipped} are not available to this "
            f"process (allowed: {sorted(allowed)}); not pinning them",
            warning=True,
        )
    if not wanted:
        return None
    os.sched_setaffinity(0, wanted)
    return wanted


def _pin_this_thread(cores, pinned):
    """Pin the thread running execute() when it is not one pinned already (the stub may call
    execute() from another thread than initialize()); ``pinned`` holds the native thread ids."""
    tid = threading.get_native_id()
    if tid not in pinned:
        os.sched_setaffinity(0, cores)
        pinned.add(tid)


def _torch_runner(module, torch, device=None):
    def run(arrays):
        # An absent optional input is passed as None (Optional[Tensor] in the model); trailing ones are
        # left out so the model's own defaults apply.
        while arrays and arrays[-1] is None:
            arrays = arrays[:-1]
        with torch.inference_mode():
            # Triton's input buffers are read-only; torch wants to own writable memory.
            tensors = [None if a is None else torch.from_numpy(a if a.flags.writeable else a.copy()) for a in arrays]
            if device is not None:
                tensors = [None if t is None else t.to(device) for t in tensors]
            result = module(*tensors)
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        return [r.detach().cpu().numpy() if hasattr(r, "detach") else np.asarray(r) for r in results]

    return run


def _huge_page_weights():
    """Weights in transparent huge pages: a CPU forward reads all of them per call (~100 MB for a
    large MLP), and with 4 KB pages its speed varies with where they land. PyTorch's allocator
    madvises 2 MB pages for blocks of 2 MB and more when THP_MEM_ALLOC_ENABLE=1; it reads the
    variable once, so this runs before torch is imported. A value already set (0: off) is kept;
    the kernel's THP mode "never" makes it a no-op."""
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


def load_pytorch_cpu(settings, layout):
    _huge_page_weights()
    import torch

    torch.set_num_threads(settings["threads"])
    return _torch_runner(torch.jit.load(settings["path"], map_location="cpu"), torch)


def _data_parallel(data_parallel, module, settings, layout):
    """``module`` over all of the instance's cores (a bare jit.load would use only one of them):
    DataParallel (device ids count from 0 within NEURON_RT_VISIBLE_CORES: DataParallel API pages)
    with num_workers set only when NUM_THREADS_PER_CORE asks for it. DataParallel scatters dim 0
    over the cores (DataParallel pages; TNXSRC data_parallel.py scatter_map), so a model whose dim 0
    is not a batch is served unwrapped on one core, and refused with more."""
    cores = len(settings["cores"])
    if not layout.batched:
        if cores > 1:
            raise SettingsError(
                f"the model has no batch dim (max_batch_size 0 and dims not [-1, ...]), and DataParallel would "
                f"split its dim 0 over the instance's {cores} cores; give each instance one core (instance count "
                f"= the cores of the range)"
            )
        return module
    model = data_parallel(module, device_ids=list(range(cores)))
    if settings["num_workers"] is not None:
        model.num_workers = settings["num_workers"]
    return model


def load_pytorch_inf1(settings, layout):
    _pin_neuron_cores(settings)
    import torch

    importlib.import_module("torch_neuron")  # registers torch.neuron and the neuron::forward ops
    neuron = torch.neuron  # type: ignore[attr-defined]

    return _torch_runner(_data_parallel(neuron.DataParallel, torch.jit.load(settings["path"]), settings, layout), torch)


def load_pytorch_neuronx(settings, layout):
    """inf2 and trn1: PyTorch/XLA torch_neuronx ScriptModules (saved after lazy_load, so DataParallel
    loads them once)."""
    _pin_neuron_cores(settings)
    import torch
    import torch_neuronx

    return _torch_runner(
        _data_parallel(torch_neuronx.DataParallel, torch.jit.load(settings["path"]), settings, layout), torch
    )


def load_pytorch_torchneuron(settings, layout):
    """trn2 and trn3: a torch.export program on TorchNeuron's ``neuron`` device, compiled as its docs
    show: ``torch.compile(model, backend="neuron", fullgraph=True)`` with ``dynamic=False`` (dynamic
    shapes are rejected; each new batch size compiles on first use and is reused after: DOCS
    torch/compile/how-to-optimize-with-torch-compile.html, reference-torch-compile.html)."""
    _pin_neuron_cores(settings)
    import torch
    import torch_neuronx  # noqa: F401  (registers the neuron device and the "neuron" torch.compile backend)

    try:
        program = torch.export.load(settings["path"])
    except Exception as err:
        raise SettingsError(
            f"COMPILED_MODEL {settings['compiled_model']!r} is not a torch.export program ({type(err).__name__}); "
            f"{settings['target']} serves through TorchNeuron: compile it again with workbench compile --target "
            f"{settings['target']} (a torch_neuronx.trace file is the PyTorch/XLA library's, inf2/trn1 only)"
        ) from None
    # one compiled graph per batch size Triton forms (up to max_batch_size), before Dynamo gives up
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, layout.max_batch_size + 1)
    device = torch.device("neuron")
    module = torch.compile(program.module().to(device), backend="neuron", fullgraph=True, dynamic=False)
    return _torch_runner(module, torch, device)


def _tf_signature(loaded, settings, layout):
    key = settings["signature"]
    if key not in loaded.signatures:
        raise SettingsError(
            f"SavedModel {settings['path']} has no signature {key!r} (has: {sorted(loaded.signatures)})"
        )
    signature = loaded.signatures[key]
    takes = set(signature.structured_input_signature[1])
    gives = set(signature.structured_outputs)
    names = [spec["name"] for spec in layout.inputs]
    outputs = [spec["name"] for spec in layout.outputs]
    if set(names) != takes or not set(outputs) <= gives:
        raise SettingsError(
            f"config tensors must be the signature {key!r} keys: inputs {sorted(takes)}, outputs {sorted(gives)}; "
            f"the config has inputs {names}, outputs {outputs}"
        )
    return signature


def load_tensorflow(settings, layout):
    """One SavedModel signature called by key. On Neuron, as upstream did: as many loads as the
    instance has cores and a pool of cores x threads-per-core workers, a batch split over them so
    several pieces run at once (upstream made a new pool per request and sent empty pieces; here
    the pool lives with the instance and empty pieces are skipped). The SDK places the loads, not
    model.py: without auto-replication "the model will default to replicate on up to 4 cores"
    (archive/tensorflow/tensorflow-neuron/api-auto-replication-api.rst:56-57), so each load may
    span several of the visible cores; it is not one copy pinned per core."""
    neuron = settings["target"] in NEURON_TARGETS
    if neuron:
        _pin_neuron_cores(settings)
    import tensorflow as tf

    if settings["target"] == "cpu":
        tf.config.threading.set_intra_op_parallelism_threads(settings["threads"])
    if settings["target"] == "inf1":
        importlib.import_module("tensorflow.neuron")  # registers the Neuron ops the SavedModel calls
    elif neuron:
        importlib.import_module("tensorflow_neuronx")
    copies = len(settings["cores"]) if neuron else 1
    loaded = [tf.saved_model.load(settings["path"]) for _ in range(copies)]
    signatures = [_tf_signature(model, settings, layout) for model in loaded]
    names = [spec["name"] for spec in layout.inputs]
    outputs = [spec["name"] for spec in layout.outputs]

    def call(signature, arrays):
        result = signature(**{name: tf.constant(array) for name, array in zip(names, arrays) if array is not None})
        return [result[name].numpy() for name in outputs]

    workers = settings["threads"] if neuron else 1
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tf-neuron") if workers > 1 else None

    def run(arrays):
        present = [a for a in arrays if a is not None]
        rows = present[0].shape[0] if layout.batched and present and present[0].ndim else 0
        if pool is None or rows < 2:
            return call(signatures[0], arrays)
        bounds = [len(piece) for piece in np.array_split(np.arange(rows), min(workers, rows))]  # none empty
        edges = np.cumsum([0] + bounds)
        futures = [
            pool.submit(
                call, signatures[k % copies], [None if a is None else a[edges[k] : edges[k + 1]] for a in arrays]
            )
            for k in range(len(bounds))
        ]
        pieces = [future.result() for future in futures]
        return [np.concatenate([piece[i] for piece in pieces], axis=0) for i in range(len(outputs))]

    # kept on the runner (function attributes, which mypy does not model): the loaded copies own their variables
    run.model = loaded[0]  # type: ignore[attr-defined]
    run.copies = loaded  # type: ignore[attr-defined]
    run.pool = pool  # type: ignore[attr-defined]
    return run


def _right_pad(tensor, width, value, torch):
    """Fill each row after its end with ``value`` up to ``width`` columns (transformers-neuronx fills
    finished rows with the first EOS id, sampling.sample_loop_llama)."""
    if tensor.shape[1] >= width:
        return tensor
    fill = torch.full((tensor.shape[0], width - tensor.shape[1]), value, dtype=tensor.dtype)
    return torch.cat([tensor, fill], dim=1)


def load_transformers_neuronx(settings, layout):
    """A causal LM that generates: ``input_ids`` in, prompt + generated ids out (greedy, so the CPU and
    Neuron paths agree). An optional ``sequence_length`` input (one value per request) sets the total
    length, capped at TNX_SEQUENCE_LENGTH. Llama-style classes stop when every row has produced EOS;
    every row of a batch is padded to the batch's width with the first EOS id."""
    names = [spec["name"] for spec in layout.inputs]
    if "input_ids" not in names or set(names) - {"input_ids", "sequence_length"} or len(layout.outputs) != 1:
        raise SettingsError(
            f"transformers_neuronx models take input_ids (and optionally sequence_length) and return one "
            f"output; the config has inputs {names} and {len(layout.outputs)} output(s)"
        )
    tnx = settings["tnx"]
    eos = tnx["eos_token_ids"]
    fill = eos[0] if eos else None
    if settings["target"] == "cpu":
        _huge_page_weights()
        import torch
        import transformers

        torch.set_num_threads(settings["threads"])
        model = transformers.AutoModelForCausalLM.from_pretrained(settings["path"]).eval()
        pad = fill if fill is not None else (model.config.pad_token_id or 0)

        def generate(ids, length):
            # the same function as the Neuron class: sample_loop_llama stops at EOS; sample_loop bans EOS
            # for the whole length, which is what min_length = max_length does
            options = {} if tnx["stops_at_eos"] else {"min_length": length}
            with torch.inference_mode():
                return model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    max_length=length,
                    do_sample=False,
                    pad_token_id=pad,
                    eos_token_id=eos or None,
                    **options,
                )

        chunk = None
    else:
        _pin_neuron_cores(settings)
        import torch
        import transformers_neuronx

        cls = getattr(transformers_neuronx, tnx["model_class"], None)
        if cls is None:
            raise SettingsError(
                f"parameter TNX_MODEL_CLASS = {tnx['model_class']!r} is not a transformers_neuronx class"
            )
        options = {key: tnx[key] for key in ("batch_size", "tp_degree", "n_positions", "amp")}
        if tnx["model_class"] == "GPT2ForSamplingWithContextBroadcasting":
            options["prompt_batch_size"] = tnx["batch_size"]  # one prompt per row, not one broadcast to all
        if tnx["unroll"] is not None:
            options["unroll"] = tnx["unroll"]
        model = cls.from_pretrained(settings["path"], **options)
        if tnx["compiled_dir"] is not None:
            model.load(tnx["compiled_dir"])  # reuse the saved graphs instead of compiling again
        model.to_neuron()

        def generate(ids, length):
            with torch.inference_mode():
                return model.sample(ids, sequence_length=length, top_k=1)

        chunk = tnx["batch_size"]  # the compiled batch: pad the last chunk up to it

    def run(arrays):
        ids = torch.from_numpy(np.array(arrays[names.index("input_ids")]))
        single = ids.dim() == 1
        ids = ids.unsqueeze(0) if single else ids
        length = tnx["sequence_length"]
        if "sequence_length" in names and arrays[names.index("sequence_length")] is not None:
            length = min(length, int(np.asarray(arrays[names.index("sequence_length")]).max()))
        if length <= ids.shape[1]:
            raise RequestError(f"sequence_length {length} leaves no room after a prompt of {ids.shape[1]} tokens")
        step = chunk or ids.shape[0]
        pieces = []
        for first in range(0, ids.shape[0], step):
            part = ids[first : first + step]
            rows = part.shape[0]
            if rows < step:
                part = torch.cat([part, part[-1:].expand(step - rows, -1)])
            pieces.append(generate(part, length)[:rows])
        width = max(piece.shape[1] for piece in pieces)
        if fill is not None:
            pieces = [_right_pad(piece, width, fill, torch) for piece in pieces]
        out = torch.cat(pieces).numpy()
        return [out[0] if single else out]

    def batch_key(arrays):
        """Requests asking for different lengths are generated separately."""
        if "sequence_length" not in names or arrays[names.index("sequence_length")] is None:
            return None
        return tuple(np.asarray(arrays[names.index("sequence_length")]).ravel().tolist())

    run.batch_key = batch_key  # type: ignore[attr-defined]  # read by TritonPythonModel.execute
    run.model = model  # type: ignore[attr-defined]
    return run


LOADERS = {
    ("cpu", "pytorch"): load_pytorch_cpu,
    ("inf1", "pytorch"): load_pytorch_inf1,
    ("inf2", "pytorch"): load_pytorch_neuronx,
    ("trn1", "pytorch"): load_pytorch_neuronx,
    ("trn2", "pytorch"): load_pytorch_torchneuron,
    ("trn3", "pytorch"): load_pytorch_torchneuron,
    ("cpu", "tensorflow"): load_tensorflow,
    ("inf1", "tensorflow"): load_tensorflow,
    ("inf2", "tensorflow"): load_tensorflow,
    ("trn1", "tensorflow"): load_tensorflow,
    ("cpu", "transformers_neuronx"): load_transformers_neuronx,
    ("inf2", "transformers_neuronx"): load_transformers_neuronx,
    ("trn1", "transformers_neuronx"): load_transformers_neuronx,
}


# --- Triton entry points --------------------------------------------------------------------------


class TritonPythonModel:
    def initialize(self, args):
        model_config = json.loads(args["model_config"])
        try:
            self.settings = read_settings(model_config, args["model_repository"], args.get("model_instance_name", ""))
            self.layout = Layout(model_config, self.settings["framework"])
            affinity = None
            if self.settings["target"] == "cpu" and self.settings["cpu_affinity"]:
                affinity = _pin_cpu_cores(self.settings)
            self._affinity, self._pinned = affinity, {threading.get_native_id()}
            self.run = LOADERS[(self.settings["target"], self.settings["framework"])](self.settings, self.layout)
        except SettingsError as err:
            raise pb_utils.TritonModelException(f"{model_config.get('name', 'model')}: {err}") from None
        except ImportError as err:
            raise pb_utils.TritonModelException(
                f"{model_config.get('name', 'model')}: target {self.settings['target']} with framework "
                f"{self.settings['framework']} needs the Python package {err.name!r}, which this Triton's Python "
                f"cannot import ({err}); install it there, or set WORKBENCH_TARGET to match this machine"
            ) from None
        s = self.settings
        where = (
            "NEURON_RT_VISIBLE_CORES=" + visible_cores(s["cores"])
            if s["target"] in NEURON_TARGETS
            else (f"cpu affinity {affinity}" if affinity else "cpu affinity off")
        )
        _log(
            f"workbench instance {s['instance']}/{s['count']}: target {s['target']} framework {s['framework']} "
            f"cores {visible_cores(s['cores'])} threads {s['threads']} {where} model {s['path']}"
        )

    def execute(self, requests):
        if self._affinity:
            _pin_this_thread(self._affinity, self._pinned)
        responses = [None] * len(requests)
        groups: dict = {}  # requests that can share one forward: same non-batch shapes (and runner key)
        for position, request in enumerate(requests):
            try:
                arrays = self.layout.read(request)
            except RequestError as err:
                responses[position] = error_response(str(err))
                continue
            if not (self.settings["batch_requests"] and self.layout.batched):
                groups[("single", position)] = [(position, arrays)]
                continue
            key = tuple(None if a is None else a.shape[1:] for a in arrays)
            key_of = getattr(self.run, "batch_key", None)
            groups.setdefault((key, key_of(arrays) if key_of else None), []).append((position, arrays))
        for members in groups.values():
            if len(members) > 1:
                try:
                    for (position, _), outputs in zip(members, self._forward_batched([a for _, a in members])):
                        responses[position] = self.layout.response(outputs)
                    continue
                except Exception as err:  # one bad request must not fail the others: retry one by one
                    _log(
                        f"batched forward of {len(members)} requests failed ({err}); serving them one by one",
                        warning=True,
                    )
            for position, arrays in members:
                try:
                    responses[position] = self.layout.response(self.run(arrays))
                except Exception as err:
                    responses[position] = error_response(f"inference failed: {type(err).__name__}: {err}")
        return responses

    def _forward_batched(self, members):
        """One forward for all members, concatenated on dim 0 and split back by each one's rows."""
        rows = [next(a.shape[0] for a in arrays if a is not None) for arrays in members]
        joined = [None if column[0] is None else np.concatenate(column, axis=0) for column in zip(*members)]
        results = self.run(joined)
        total = sum(rows)
        for spec, result in zip(self.layout.outputs, results):
            if np.ndim(result) == 0 or np.shape(result)[0] != total:
                raise RequestError(
                    f"output {spec['name']!r} has shape {list(np.shape(result))}, not {total} rows for the batch"
                )
        bounds = np.cumsum(rows)[:-1]
        per_output = [np.split(np.asarray(result), bounds) for result in results]
        return [list(parts) for parts in zip(*per_output)]

    def finalize(self):
        """Drop the model so its memory (and Neuron cores) are released before the stub exits."""
        self.run = None
        gc.collect()
