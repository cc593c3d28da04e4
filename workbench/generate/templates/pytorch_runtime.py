"""Python-backend model.py that serves Triton's PyTorch-backend layouts where LibTorch is missing.

The workbench copies this file, unchanged, as ``<version>/model.py`` of a twin of the user's
PyTorch-backend model directory, next to the user's files:

* ``PYTORCH_LAYOUT = torchscript``: ``<version>/<PYTORCH_MODEL_FILENAME>`` is TorchScript, loaded with
  torch.jit.load; inputs are passed by their ``__i`` index, outputs taken by theirs; the LibTorch
  switches (INFERENCE_MODE, DISABLE_OPTIMIZED_EXECUTION, thread counts, JIT flags) are applied with
  the same torch calls LibTorch makes.
* ``PYTORCH_LAYOUT = pytorch2``: ``<version>/<PYTORCH_MODEL_FILENAME>`` defines the nn.Module class
  (Triton's rule: first nn.Module subclass in ``dir()`` order, built without arguments),
  ``<PYTORCH_STATE_DICT>`` its optional state dict (the real runtime's ``<stem>.pt``), or is a
  TorchScript archive loaded as it is; NUM_THREADS / NUM_INTEROP_THREADS (default 1, as upstream)
  and ``torch.compile(**TORCH_COMPILE_OPTIONAL_PARAMETERS)``; outputs leave with the dtype the
  module gives, as upstream's runtime sends them (no conversion to the config's).

Requests are handled as the real backend handles them: one forward for the requests Triton hands
over together, and a forward that raises fails all of them (see ``execute``); a request that is
malformed fails alone, with the words the generated model.py uses. What LibTorch refuses is refused
here in its words (pytorch_backend r24.10 libtorch.cc): List[Tensor] results, 0-d outputs, an
output dtype other than the config's; a single ``Dict[str, Tensor]`` argument gets the inputs by name. Every instance logs the
settings it really runs with (``PyTorch emulation ...`` at INFO), so a sweep can confirm which
variant was loaded. Self-contained: numpy, torch and triton_python_backend_utils only.
"""

import importlib.util
import json
import locale
import os

import numpy as np
import torch
import triton_python_backend_utils as pb_utils


def _utf8_locale():
    """The stub embeds Python without applying the environment's locale, so open() defaults to
    ASCII and torch.compile (inductor reads UTF-8 templates) fails to load; adopt the
    environment's locale, or C.UTF-8 when that is not UTF-8 either."""
    for name in ("", "C.UTF-8"):
        try:
            locale.setlocale(locale.LC_CTYPE, name)
        except locale.Error:
            continue
        if locale.getpreferredencoding(False).lower().replace("-", "") == "utf8":
            return


_TRUE = ("true", "on", "1")
_FALSE = ("false", "off", "0")


def _flag(params, key, default):
    """LibTorch's boolean spelling: true/on/1 or false/off/0, any case, no spaces around."""
    if key not in params:
        return default
    value = params[key].lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise pb_utils.TritonModelException(f"parameter {key} = {params[key]!r} is not a boolean")


def _count(params, key, default):
    if key not in params:
        return default
    try:
        value = int(params[key].strip())
    except ValueError:
        raise pb_utils.TritonModelException(f"parameter {key} = {params[key]!r} is not an integer") from None
    if value < 1:
        raise pb_utils.TritonModelException(f"parameter {key} = {value} must be at least 1")
    return value


def _set_threads(intra, inter):
    """Apply thread counts before any torch work; each instance is its own stub process, so
    inter-op threads can still be set (torch refuses once its pool has started)."""
    if inter is not None and torch.get_num_interop_threads() != inter:
        try:
            torch.set_num_interop_threads(inter)
        except RuntimeError as err:
            pb_utils.Logger.log_warn(f"inter-op threads not set to {inter}: {err}")
    if intra is not None:
        torch.set_num_threads(intra)


def _positions(names, arguments=None):
    """LibTorch's naming conventions: forward-argument names (inputs only), else NAME__i,
    else the config order."""
    if arguments is not None and all(name in arguments for name in names):
        return [arguments.index(name) for name in names]
    if all(tensor_index(name) is not None for name in names):
        return [tensor_index(name) for name in names]
    return list(range(len(names)))


# torch dtype -> Triton's name for it (TRITONSERVER_DataTypeString), for LibTorch's dtype check.
_TRITON_TYPES = {
    torch.bool: "BOOL",
    torch.uint8: "UINT8",
    torch.int8: "INT8",
    torch.int16: "INT16",
    torch.int32: "INT32",
    torch.int64: "INT64",
    torch.float16: "FP16",
    torch.float32: "FP32",
    torch.float64: "FP64",
    torch.bfloat16: "BF16",
}


class OutputError(Exception):
    """An execution whose outputs LibTorch refuses; every response of it carries the message."""


def _list_type(values):
    return (
        "str"
        if all(isinstance(v, str) for v in values)
        else "Tensor"
        if all(isinstance(v, torch.Tensor) for v in values)
        else type(values[0]).__name__
    )


def _libtorch_results(results):
    """forward()'s result as LibTorch takes it (libtorch.cc Execute): a Tensor, a List[str], or a
    tuple of those; anything else fails the execution in LibTorch's words."""
    if isinstance(results, tuple):
        for index, value in enumerate(results):
            if isinstance(value, list) and value and _list_type(value) != "str":
                raise ValueError(
                    f"output at index {index} must be of type Tensor or List[str], received List[{_list_type(value)}]"
                )
        return list(results)
    if isinstance(results, torch.Tensor):
        return [results]
    if isinstance(results, list):
        if results and _list_type(results) != "str":
            raise ValueError(f"output must be of type Tensor or List[str], received List[{_list_type(results)}]")
        return [results]
    raise ValueError(
        "output must be of type Tensor, List[str] or Tuple containing one of these two types. "
        "It should not be a List / Dictionary of Tensors or a Scalar"
    )


def _pick_module_class(module):
    for name in dir(module):
        attr = getattr(module, name)
        if isinstance(attr, type) and issubclass(attr, torch.nn.Module):
            return attr
    raise pb_utils.TritonModelException("model module defines no torch.nn.Module subclass")


# --- request reading: the same code in templates/python_model.py (tests/test_request_handling.py
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


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        self.layout = params.get("PYTORCH_LAYOUT", "torchscript")
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        artifact = os.path.join(version_dir, params.get("PYTORCH_MODEL_FILENAME", "model.pt"))
        max_batch_size = config.get("max_batch_size", 0)
        self.batching = max_batch_size > 0
        for entry in config["input"] + config["output"]:
            if entry["data_type"] == "TYPE_BF16":
                raise pb_utils.TritonModelException(
                    f"{entry['name']!r}: TYPE_BF16 tensors are not emulated (numpy, which carries the tensors "
                    "here, has no bfloat16); serve this model on the real PyTorch backend"
                )
        self.inputs = [tensor_entry(t, max_batch_size) for t in config["input"]]
        self.outputs = [tensor_entry(t, max_batch_size) for t in config["output"]]
        self.output_types = [t["data_type"].removeprefix("TYPE_") for t in config["output"]]
        kind = args["model_instance_kind"]
        self.device = torch.device(f"cuda:{args['model_instance_device_id']}" if kind == "GPU" else "cpu")
        self.cache_cleaning = False
        if self.layout == "torchscript":
            settings = self._load_torchscript(params, artifact, kind)
        else:
            settings = self._load_pytorch2(params, artifact, version_dir, kind, args["model_name"])
        settings["intra_op_threads"] = torch.get_num_threads()
        settings["inter_op_threads"] = torch.get_num_interop_threads()
        settings["device"] = str(self.device)
        shown = " ".join(f"{key}={value}" for key, value in sorted(settings.items()))
        pb_utils.Logger.log_info(
            f"PyTorch emulation of '{args['model_name']}' instance '{args['model_instance_name']}': "
            f"layout={self.layout} {shown}"
        )

    def _load_torchscript(self, params, artifact, kind):
        _set_threads(_count(params, "INTRA_OP_THREAD_COUNT", None), _count(params, "INTER_OP_THREAD_COUNT", None))
        self.inference_mode = _flag(params, "INFERENCE_MODE", True)
        self.optimized = not _flag(params, "DISABLE_OPTIMIZED_EXECUTION", False)
        settings = {"inference_mode": self.inference_mode, "optimized_execution": self.optimized}
        # Process-wide JIT switches, as LibTorch sets them; absent keys keep torch's defaults.
        for key, setter in (
            ("ENABLE_JIT_EXECUTOR", torch._C._jit_set_profiling_executor),
            ("ENABLE_JIT_PROFILING", torch._C._jit_set_profiling_mode),
            ("ENABLE_TENSOR_FUSER", torch._C._jit_set_texpr_fuser_enabled),
        ):
            if key in params:
                setter(_flag(params, key, True))
                settings[key.lower().removeprefix("enable_")] = _flag(params, key, True)
        if _flag(params, "DISABLE_CUDNN", False):
            torch.backends.cudnn.enabled = False
            settings["cudnn"] = False
        self.cache_cleaning = _flag(params, "ENABLE_CACHE_CLEANING", False) and self.device.type == "cuda"
        # KIND_MODEL: load where the archive says, as LibTorch does; otherwise on the instance device.
        with torch.inference_mode(self.inference_mode):
            self.model = torch.jit.load(artifact, map_location=None if kind == "MODEL" else self.device)
        self.model.eval()
        if kind == "MODEL":
            self.device = next((p.device for p in self.model.parameters()), torch.device("cpu"))
        schema = [a for a in self.model.forward.schema.arguments if a.name != "self"]
        # One Dict[str, Tensor] argument: LibTorch hands it every input, keyed by its config name.
        self.dict_input = len(schema) == 1 and schema[0].type.kind() == "DictType"
        if self.dict_input:
            self.call_inputs = list(self.inputs)
        else:
            positions = _positions([t["name"] for t in self.inputs], [a.name for a in schema])
            self.call_inputs = [t for _, t in sorted(zip(positions, self.inputs), key=lambda pair: pair[0])]
        self.result_positions = _positions([t["name"] for t in self.outputs])
        return settings

    def _load_pytorch2(self, params, artifact, version_dir, kind, model_name):
        _utf8_locale()
        _set_threads(_count(params, "NUM_THREADS", 1), _count(params, "NUM_INTEROP_THREADS", 1))
        self.inference_mode, self.optimized, self.dict_input = True, True, False
        compile_params = json.loads(params.get("TORCH_COMPILE_OPTIONAL_PARAMETERS", "{}"))
        self.call_inputs = list(self.inputs)
        self.result_positions = list(range(len(self.outputs)))
        with torch.inference_mode():
            if not artifact.endswith(".py"):  # a TorchScript archive: loaded and run as it is, not compiled
                self.model = torch.jit.load(artifact)
                self.device = self._pytorch2_device(kind, self.model)
                self.model.to(self.device).eval()
                return {"torchscript": os.path.basename(artifact), "inference_mode": True}
            spec = importlib.util.spec_from_file_location(model_name, artifact)
            if spec is None or spec.loader is None:
                raise ImportError(f"{artifact} cannot be imported as a Python module")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            raw = _pick_module_class(module)()
            self.device = self._pytorch2_device(kind, raw)
            weights = os.path.join(version_dir, params.get("PYTORCH_STATE_DICT", "model.pt"))
            if os.path.isfile(weights):
                raw.load_state_dict(torch.load(weights, map_location=self.device))
            else:
                pb_utils.Logger.log_info(f"Model parameter file not found for '{model_name}'")  # upstream's words
            raw.to(self.device).eval()
        self.model = torch.compile(raw, **compile_params)
        return {
            "torch_compile": json.dumps(compile_params, sort_keys=True).replace(" ", ""),
            "module_class": type(raw).__name__,
            "inference_mode": True,
        }

    def _pytorch2_device(self, kind, model):
        """The runtime's device rule: the instance's, or for KIND_MODEL the first parameter's."""
        if kind != "MODEL":
            return self.device
        for parameter in model.parameters():
            return parameter.device
        raise pb_utils.TritonModelException("Cannot determine model device")  # upstream's words

    def _torch_input(self, spec, array):
        if spec["dtype"] == np.object_:  # TYPE_STRING: LibTorch hands 1-D strings over as a List[str]
            return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in array.reshape(-1)]
        # Triton's input buffers are read-only; torch wants memory it may write (LibTorch copies too).
        return torch.from_numpy(array if array.flags.writeable else array.copy()).to(self.device)

    def _run(self, inputs):
        with torch.no_grad(), torch.inference_mode(self.inference_mode), torch.jit.optimized_execution(self.optimized):
            if self.dict_input:
                results = self.model({spec["name"]: value for spec, value in zip(self.call_inputs, inputs)})
            else:
                results = self.model(*inputs)
        if self.layout == "torchscript":
            results = _libtorch_results(results)
        elif not isinstance(results, (tuple, list)):
            results = [results]
        return [results[position] for position in self.result_positions]

    def _check_outputs(self, outputs):
        """What LibTorch's ReadOutputTensors refuses for the whole execution: a 0-d output, or a dtype
        other than the config's (the PyTorch 2 runtime sends whatever dtype the module gives)."""
        if self.layout != "torchscript":
            return
        for spec, want, value in zip(self.outputs, self.output_types, outputs):
            if not isinstance(value, torch.Tensor):
                continue
            if value.dim() == 0:
                raise OutputError(f"output '{spec['name']}' is a scalar which is not supported.")
            got = _TRITON_TYPES.get(value.dtype, str(value.dtype).removeprefix("torch.").upper())
            if got != want:
                raise OutputError(
                    f"configuration expects datatype TYPE_{want} for output '{spec['name']}', model provides TYPE_{got}"
                )

    def _output(self, spec, value):
        if spec["dtype"] == np.object_:
            return pb_utils.Tensor(spec["name"], np.array([str(v).encode("utf-8") for v in value], dtype=np.object_))
        return pb_utils.Tensor(spec["name"], value.detach().cpu().numpy())

    def execute(self, requests):
        """A bad request (missing input, wrong dtype or shape) fails alone, as Triton's own checks make
        it fail before LibTorch sees it. A forward that raises fails every request it ran for: both
        real runtimes do that (libtorch.cc answers every response of the execution with the error;
        the PyTorch 2 runtime's model.py lets the exception leave execute), measured on r24.10."""
        responses = [None] * len(requests)
        members = []  # (position, torch inputs) of the requests that were read
        for position, request in enumerate(requests):
            try:
                arrays = read_request(request, self.call_inputs, self.batching)
            except RequestError as err:
                responses[position] = error_response(str(err))
                continue
            members.append(
                (position, [self._torch_input(spec, array) for spec, array in zip(self.call_inputs, arrays)])
            )
        try:
            strings = any(spec["dtype"] == np.object_ for spec in self.call_inputs)
            if self.batching and len(members) > 1 and not strings:
                sizes = [inputs[0].shape[0] for _, inputs in members]
                outputs = self._run([torch.cat(column) for column in zip(*(inputs for _, inputs in members))])
                self._check_outputs(outputs)
                split = [torch.split(output, sizes) for output in outputs]
                results = [[chunks[i] for chunks in split] for i in range(len(members))]
            else:
                results = [self._run(inputs) for _, inputs in members]
                for outputs in results:
                    self._check_outputs(outputs)
            for (position, _), outputs in zip(members, results):
                responses[position] = pb_utils.InferenceResponse(
                    output_tensors=[self._output(spec, value) for spec, value in zip(self.outputs, outputs)]
                )
        except OutputError as err:  # LibTorch's ReadOutputTensors answers every response with its words
            for position, _ in members:
                responses[position] = error_response(str(err))
        except Exception as err:
            if self.layout == "pytorch2":
                raise  # as that runtime does: the Python backend answers every request with the exception
            for position, _ in members:
                responses[position] = error_response(f"PyTorch execute failure: {err}")  # LibTorch's words
        if self.cache_cleaning:
            torch.cuda.empty_cache()
        return responses

    def finalize(self):
        self.model = None
