"""The test process's guard (swe_rl_jax; docs/HARNESS.md, "The guard"). Not a module of the package:
the harness copies this directory into each run and puts it first on PYTHONPATH, so every Python
process of the run imports it at start-up, after the environment's own `.pth` files (built before
any patch; an install step may add none that runs code: harness/startup.py) and before any code of
the repository.

In the process the harness started (the one whose environment names the guard's configuration; the
variable is removed at once, so the process's children run unguarded and cannot write the channel),
it adds an audit hook (PEP 578: no Python code can remove one), which
- reads a secret key from a descriptor and closes it, and writes records to another descriptor (a
  pipe the harness drains), each with a sequence number and an HMAC under the key. The key lives
  only in this hook's closure, which no Python code can reach: the ways to it (the garbage
  collector, frames, ctypes, /proc/self/mem) are what the hook watches, and hooks run untraced;
- attributes the events a forger needs to the code that raised them, by the frames on the stack. A
  frame is trusted when its file is a `.py` file of the standard library, of the cached environment,
  of this directory, or of the work tree with the contents the harness wrote before any code ran
  (`trusted`: path -> git blob id), or when its code is a function (class body, lambda,
  comprehension) of a file the model patch changed that the patch left as it was (`partly_trusted`:
  path -> blob id and (first line, name) of each such code object); anything else (what the patch
  wrote or added, what the install step changed, code compiled at run time) is not. A watched event
  from code that is not trusted ends the process at once with an `E` record naming the event, the
  file and line: the run is `tampered`;
- snapshots, on the plugin's request, what the test framework, `builtins` and the standard library
  bind (functions, classes and their attributes, modules) and compares later states with it;
- accepts records of the pytest plugin beside it (`_swe_rl_jax_guard.py`) only from that plugin's
  own code objects with nothing untrusted on the stack, and replaces the file a record names with
  whether that file is trusted.

The hook runs no code but its own: everything it calls is bound here, before any code of the
repository runs, and is a C function or a method of a builtin type (a Python function of the
standard library, a builtin looked up by name, a property of an object the code under test made,
could be replaced or written by that code and would then run inside the hook, where the watched
events are not judged). An exception inside the hook is raised to the code whose event it was: the
operation does not happen.
Python 3.8 and later (audit hooks); older interpreters run unguarded, and the harness says so.
Written for every Python from 3.8 on: no newer syntax.
"""


def _start():
    import sys
    import os
    if not hasattr(sys, "addaudithook"):
        return
    config_path = os.environ.pop("SWE_RL_JAX_GUARD", None)
    if not config_path:
        return
    import _thread
    import builtins
    import hashlib
    import json
    import marshal
    import types
    with open(config_path, "rb") as handle:
        config = json.loads(handle.read().decode("utf-8"))
    try:
        key = os.read(config["key_fd"], 64)
        os.close(config["key_fd"])
    except OSError:  # not the process the harness started: nothing to report to
        return
    channel = config["channel_fd"]
    os.set_inheritable(channel, False)  # the run's children cannot write it

    # Bound now (module docstring).
    getframe, write, exit_now, getcwd, sha256, sha1 = (sys._getframe, os.write, os._exit, os.getcwd, hashlib.sha256,
                                                      hashlib.sha1)
    get_ident, lock, marshal_loads, read_file = _thread.get_ident, _thread.allocate_lock(), marshal.loads, open
    str_, bytes_, int_, tuple_, list_, dict_, set_, frozenset_, type_, len_, id_, isinstance_, issubclass_, any_ = (
        str, bytes, int, tuple, list, dict, set, frozenset, type, len, id, isinstance, issubclass, any)
    map_ = map
    Exception_, OSError_, ValueError_ = Exception, OSError, ValueError
    code_type, function_type, module_type, method_type = types.CodeType, types.FunctionType, types.ModuleType, \
        types.MethodType
    method_function = method_type.__dict__["__func__"].__get__
    builtin_names = frozenset(vars(builtins))
    module_dict, class_dict = type(sys).__dict__["__dict__"].__get__, type.__dict__["__dict__"].__get__
    function_code = function_type.__dict__["__code__"].__get__
    writing_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    modules = sys.modules
    import threading
    import warnings
    # What pytest itself swaps while a collection or a test phase runs (its capture of warnings, of
    # exceptions in threads and of unraisable ones), whatever its plugins' order, and the last
    # uncaught exception it records: none decides an outcome.
    swapped_by_pytest = {
        id(vars(sys)): frozenset(("excepthook", "unraisablehook", "displayhook", "breakpointhook", "last_type",
                                  "last_value", "last_traceback", "last_exc")),
        id(vars(warnings)): frozenset(("showwarning", "_showwarnmsg_impl", "_showwarning_orig", "formatwarning")),
        id(vars(threading)): frozenset(("excepthook",)),
        id(vars(builtins)): frozenset(("_",)),  # the last value a display hook showed (doctests)
    }
    # What a test could use as a tool and a forger replace: functions, classes, modules, descriptors.
    behaviour = (types.FunctionType, types.BuiltinFunctionType, types.ModuleType, types.MethodType, classmethod,
                 staticmethod, property, type(len.__call__), type(str.join), type(dict.__dict__["fromkeys"]))

    block = (sha256(key).digest() if len(key) > 64 else key).ljust(64, b"\0")
    inner_pad, outer_pad = bytes(b ^ 0x36 for b in block), bytes(b ^ 0x5C for b in block)
    del key, block

    worktree = config["worktree"].rstrip("/") + "/"
    trusted_files = dict(config["trusted"])  # work-tree path -> git blob id, as the harness wrote it
    # A file the model patch changed: path -> (its blob id, (first line, name) of the code it kept).
    partly = {worktree + rel: (blob, frozenset((line, name) for line, name in kept))
              for rel, (blob, kept) in config.get("partly_trusted", {}).items()}
    test_files = frozenset(config["tests"])
    stdlib = os.path.dirname(os.__file__)  # where the standard library's Python files are (sysconfig costs ms)
    std_roots = tuple({stdlib.rstrip("/") + "/", os.path.realpath(stdlib).rstrip("/") + "/"})
    own = os.path.dirname(os.path.abspath(__file__)) + "/"
    trusted_roots = tuple([r.rstrip("/") + "/" for r in config["trusted_roots"]] + [own])
    untrusted_roots = tuple([r.rstrip("/") + "/" for r in config.get("untrusted_roots", [])] + ["/tmp/", "/dev/shm/"])
    framework_roots = frozenset(("pytest", "_pytest", "pluggy", "py", "unittest", "builtins", config.get("plugin", "")))
    startup_stems = frozenset(("sitecustomize", "usercustomize"))
    config_names = frozenset(("conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini",
                              "setup.cfg", "pyproject.toml"))
    # The standard library's readers of frames and sources: called by untrusted code, they read for it.
    readers = frozenset(("currentframe", "stack", "trace", "getouterframes", "getinnerframes", "getframeinfo",
                         "walk_stack", "walk_tb", "getsource", "getsourcelines", "findsource", "getlines", "getline",
                         "updatecache", "checkcache", "getblock"))
    formatting = ("/traceback.py", "/logging/__init__.py")

    trust_cache = {}  # filename -> (trusted, standard library)
    last_read = {}  # thread id -> the path it last opened for reading
    state = {"seq": 0}
    busy = set()
    snapshots = {}  # "framework" | "stdlib" -> [[name, namespace, ids of its values, held bindings, a class's]]
    hook_tables = []

    def mac(data):
        return sha256(outer_pad + sha256(inner_pad + data).digest()).hexdigest()

    def escape(value):
        return str_(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")

    def emit(kind, fields):
        with lock:
            body = str_(state["seq"]) + "\t" + kind
            for field in fields:
                body += "\t" + escape(field)
            data = body.encode("utf-8", "replace")
            state["seq"] += 1
            data += b"\t" + mac(data).encode("ascii") + b"\n"
            while data:
                data = data[write(channel, data):]

    def classify(filename):
        """(trusted, standard library): the standard library's frames act for their caller."""
        found = trust_cache.get(filename)
        if found is not None:
            return found
        if not isinstance_(filename, str_) or (filename.startswith("<") and not filename.startswith("<frozen ")):
            found = (False, False)
        elif filename.startswith("<frozen "):
            found = (True, True)
        elif filename.startswith(worktree):
            found = (filename[len_(worktree):] in trusted_files, False)
        elif filename.startswith(own):
            found = (True, False)
        elif in_stdlib(filename):
            found = (True, True)
        else:
            found = (in_trusted_root(filename), False)
        if found[0] and filename.startswith("/") and not filename.endswith(".py") and "/bin/" not in filename:
            found = (False, False)  # a template's or data file's name: code compiled under it is nobody's
        trust_cache[filename] = found
        return found

    def frame_trusted(frame):
        """Whether the code running in `frame` is trusted: its file's, or (a file the patch changed) a
        code object the patch kept."""
        code = frame.f_code
        trusted, standard = classify(code.co_filename)
        if trusted or standard:
            return trusted
        kept = partly.get(code.co_filename)
        return kept is not None and (code.co_firstlineno, code.co_name) in kept[1]

    def in_stdlib(path):
        return path.startswith(std_roots) and "-packages/" not in path and not path.startswith(untrusted_roots)

    def in_trusted_root(path):  # the longest root that holds it decides: an image's `/` is trusted, its /tmp not
        return longest(path, trusted_roots) > longest(path, untrusted_roots)

    def longest(filename, roots):
        best = -1
        for root in roots:
            if filename.startswith(root) and len_(root) > best:
                best = len_(root)
        return best

    def is_import(code):  # what runs below an import acts for the module being imported
        return code.co_name == "_find_and_load" and code.co_filename.startswith("<frozen importlib")

    def anywhere(frame, stop_at_import=True):
        """The innermost untrusted frame (up to the innermost import), or None."""
        while frame is not None:
            code = frame.f_code
            if stop_at_import and is_import(code):
                return None
            if not frame_trusted(frame):
                return frame
            frame = frame.f_back
        return None

    def arranged(frame):
        """The outermost frame when the whole stack is the standard library's, outside any import: a
        callback someone arranged (a thread's target, an exit or signal handler, a finalizer), which
        acts for whoever arranged it, and no trusted code did; else None."""
        outermost = None
        while frame is not None:
            code = frame.f_code
            if is_import(code) or not classify(code.co_filename)[1]:
                return None
            outermost = frame
            frame = frame.f_back
        return outermost

    def actor(frame, formatting_allowed=False):
        """The code that raised the event: the innermost frame outside the standard library, when it is
        untrusted (None when it is trusted, or when an import comes first). With `formatting_allowed`,
        a traceback being formatted (the standard library's traceback or logging) acts for nobody,
        unless untrusted code called one of the readers of frames or sources (`readers`) directly."""
        formatted, outermost = False, None
        while frame is not None:
            code = frame.f_code
            if is_import(code):
                return None
            standard = classify(code.co_filename)[1]
            if not standard:
                if frame_trusted(frame) or (formatted and outermost.co_name not in readers):
                    return None
                return frame
            formatted = formatted or (formatting_allowed and code.co_filename.endswith(formatting))
            outermost = code
            frame = frame.f_back
        return None

    def reader(frame):
        """For events that hand out frames: the caller when it is untrusted, or the untrusted code that
        called one of the standard library's readers of frames (`readers`) that raised it."""
        if not classify(frame.f_code.co_filename)[1]:
            return None if frame_trusted(frame) else frame
        outermost = None
        while frame is not None and classify(frame.f_code.co_filename)[1]:
            if is_import(frame.f_code):
                return None
            outermost = frame.f_code
            frame = frame.f_back
        if frame is not None and outermost.co_name in readers and not frame_trusted(frame):
            return frame
        return None

    def flag(event, frame, detail):
        try:
            name = frame.f_code.co_filename
            emit("E", (event, name[len_(worktree):] if name.startswith(worktree) else name, frame.f_lineno, detail))
        finally:
            exit_now(86)  # GUARD_EXIT in harness/guard.py

    def resolve(path):
        """An absolute, normalized path ("" for a descriptor); links are not followed: a test file reached
        through a link is not recognized (docs/HARNESS.md says so)."""
        if isinstance_(path, bytes_):
            path = path.decode("utf-8", "surrogateescape")
        if type_(path) is not str_:
            return ""
        if not path.startswith("/"):
            try:
                path = getcwd() + "/" + path
            except OSError_:  # the working directory is gone
                return ""
        parts = []
        for part in path.split("/"):
            if part == "..":
                if parts:
                    parts.pop()
            elif part and part != ".":
                parts.append(part)
        return "/" + "/".join(parts)

    def protected(path):
        """What no untrusted code may write: start-up files and compiled code anywhere; in the work tree,
        test modules, pytest's configuration and every file the harness vouches for (`trusted_files`:
        rewritten, it would still run as trusted code)."""
        name = path.rsplit("/", 1)[-1]
        if name.endswith(".pth") or name.split(".", 1)[0] in startup_stems or "/__pycache__/" in path:
            return True
        if not path.startswith(worktree):
            return False
        rel = path[len_(worktree):]
        return (rel in test_files or rel in trusted_files or name in config_names
                or (name.startswith("test_") and name.endswith(".py")) or name.endswith("_test.py"))

    def on_open(event, args, caller):
        path = resolve(args[0])
        if not path:
            return
        mode = args[1] if len_(args) > 1 and type_(args[1]) is str_ else ""
        flags = args[2] if len_(args) > 2 and type_(args[2]) is int_ else 0
        writing = "w" in mode or "a" in mode or "x" in mode or "+" in mode or flags & writing_flags
        if not writing:  # what the import system unmarshals next in this thread came from here
            last_read[get_ident()] = path
        if path.startswith("/proc/") and (path.endswith("/mem") or "/fd/" in path or path.endswith("/fd")) \
                or path.startswith("/dev/fd/"):
            culprit = actor(caller)
            if culprit is not None or path.endswith("/mem"):
                flag(event, culprit or caller, "opened " + path)
        elif writing and protected(path):
            culprit = actor(caller)
            if culprit is not None:
                flag(event, culprit, "wrote " + path)
        elif path.startswith(worktree) and path[len_(worktree):] in test_files:
            culprit = actor(caller, formatting_allowed=True)
            if culprit is not None:
                flag(event, culprit, "read the test file " + path[len_(worktree):])

    def on_path_change(event, args, caller):
        for arg in args[:2]:
            path = resolve(arg)
            if path and protected(path):
                culprit = actor(caller)
                if culprit is not None:
                    flag(event, culprit, "changed " + path)

    def on_anywhere(event, args, caller):
        culprit = anywhere(caller) or arranged(caller)
        if culprit is not None:
            flag(event, culprit, "")

    def on_actor(event, args, caller):
        culprit = actor(caller)
        if culprit is not None:
            flag(event, culprit, "")

    def on_native(event, args, caller):  # ctypes: no callback of the standard library's alone uses it either
        culprit = actor(caller) or arranged(caller)
        if culprit is not None:
            flag(event, culprit, "")

    def on_reader(event, args, caller):
        culprit = reader(caller) or arranged(caller)
        if culprit is not None:
            flag(event, culprit, "")

    def holds_code(value, depth):
        kind = type_(value)
        if kind is code_type:
            return True
        if depth > 50:
            return False
        if kind in (tuple_, list_, set_, frozenset_):
            for item in value:
                if holds_code(item, depth + 1):
                    return True
        elif kind is dict_:
            for pair in value.items():
                if holds_code(pair, depth + 1):
                    return True
        return False

    def claims_trust(value, depth):
        """Whether `value` holds a code object whose file is a trusted one's (or a patched file's)."""
        if type_(value) is code_type:
            if classify(value.co_filename)[0] or value.co_filename in partly:
                return True
            value = value.co_consts
        if depth > 50:
            return False
        if type_(value) in (tuple_, list_, set_, frozenset_):
            for item in value:
                if claims_trust(item, depth + 1):
                    return True
        return False

    def on_marshal(event, args, caller):
        """Code unmarshalled by untrusted code; or by the import system from bytes read outside the
        trusted places (a .pyc or a zip archive anyone may have written, children included) that claim
        a trusted file: code posing as the standard library's or the framework's."""
        culprit = actor(caller)
        source = last_read.get(get_ident(), "")
        # Bytes from the standard library's or a trusted root's directories: compiled code comes from
        # the file beside it there (the work tree holds none: no test run writes bytecode).
        if culprit is None and (in_stdlib(source) or in_trusted_root(source)):
            return
        try:
            loaded = marshal_loads(args[0])
        except Exception_:
            return
        if culprit is not None and holds_code(loaded, 0):
            flag(event, culprit, "unmarshalled code")
        if claims_trust(loaded, 0):
            flag(event, anywhere(caller, stop_at_import=False) or caller,
                 "loaded compiled code that claims a trusted file from " + source)

    def on_getattr(event, args, caller):
        name = args[1] if len_(args) > 1 else ""
        if name in ("tb_frame", "gi_frame", "cr_frame", "ag_frame"):
            on_reader(event, args, caller)
        elif name == "__code__" and type_(args[0]) is function_type:
            code = function_code(args[0])
            if code.co_filename.startswith(worktree) and code.co_filename[len_(worktree):] in test_files:
                culprit = reader(caller)
                if culprit is not None:
                    flag(event, culprit, "read the code of a test function")

    def on_setattr(event, args, caller):
        if len_(args) < 2 or args[1] not in ("__code__", "__defaults__", "__kwdefaults__", "__class__"):
            return
        if args[1] != "__class__" and type_(args[0]) is function_type \
                and not classify(function_code(args[0]).co_filename)[0]:
            return  # a function of untrusted code or made at run time (typing.NamedTuple's __new__): its maker's
        on_actor(event, args, caller)

    def on_compile(event, args, caller):
        source, filename = args[0], args[1] if len_(args) > 1 else None
        if isinstance_(filename, bytes_):
            filename = filename.decode("utf-8", "surrogateescape")
        if type_(filename) is not str_ or not filename.startswith("/") or not (classify(filename)[0]
                                                                               or filename in partly):
            return  # the name of no trusted file: it claims nothing
        if type_(source) in (str_, bytes_):
            try:
                with read_file(filename, "rb") as handle:
                    on_disk = handle.read()
            except OSError_:
                on_disk = b""
            data = source.encode("utf-8", "surrogateescape") if type_(source) is str_ else source
            if data != on_disk and data.replace(b"\r\n", b"\n") != on_disk.replace(b"\r\n", b"\n"):
                flag(event, actor(caller) or caller, "compiled what is not its contents under the name " + filename)
            if filename.startswith(worktree):
                blob = sha1(b"blob " + str_(len_(on_disk)).encode("ascii") + b"\0" + on_disk).hexdigest()
                if trusted_files.get(filename[len_(worktree):]) != blob:  # changed since the harness wrote it
                    trusted_files.pop(filename[len_(worktree):], None)
                    trust_cache.pop(filename, None)
                if filename in partly and partly[filename][0] != blob:
                    partly.pop(filename)
        else:  # a syntax tree (pytest's assertion rewriting): only trusted code compiles one under a trusted name
            culprit = anywhere(caller)
            if culprit is not None:
                flag(event, culprit, "compiled a syntax tree under the name " + filename)

    def namespaces(which):
        """(name, namespace) of what `which` covers, each namespace once: the framework's modules and
        their classes, or the standard library's modules, as imported now."""
        out, seen = [], set()

        def add(name, namespace, is_class=False):
            if id_(namespace) not in seen:
                seen.add(id_(namespace))
                out.append((name, namespace, is_class))

        for name, module in list_(modules.items()):
            if type_(module) is not module_type:
                continue
            framework = name.split(".", 1)[0] in framework_roots
            if which == "framework" and framework:
                namespace = module_dict(module)
                add(name, namespace)
                for attr, value in list_(namespace.items()):
                    if issubclass_(type_(value), type_):
                        add(name + "." + str_(attr), class_dict(value), True)
            elif which == "stdlib" and not framework:
                filename = module_dict(module).get("__file__")
                if filename is None or (type_(filename) is str_ and filename.startswith(std_roots)
                                        and "-packages/" not in filename):
                    add(name, module_dict(module))
        return out

    def is_behaviour(kind):  # by identity: `in` would call a metaclass's __eq__
        for other in behaviour:
            if kind is other:
                return True
        return issubclass_(kind, type_)

    def bound(namespace, everything=False):
        """(attr, value, behaviour) of what the namespace binds that a forger could replace (`behaviour`;
        with `everything`, every value, a flag a module would later bind to a class included), but what
        pytest itself swaps (`swapped_by_pytest`). The values are held: their ids stay theirs."""
        swapped = swapped_by_pytest.get(id_(namespace), ())
        out = []
        for attr, value in list_(namespace.items()):
            if type_(attr) is str_ and attr not in swapped:
                acts = is_behaviour(type_(value))
                if acts or everything:
                    out.append((attr, value, acts))
        return out

    def snapshot(which):
        snapshots[which] = [[name, namespace, identities(namespace), bound(namespace, which == "framework"), is_class]
                            for name, namespace, is_class in namespaces(which)]

    def identities(namespace):
        """The ids of what the namespace binds, in order (C code only): equal to an earlier list, nothing
        was bound otherwise, added or removed since (the held values keep their ids theirs)."""
        return list_(map_(id_, namespace.values()))

    def untrusted_code_in(value):
        """Whether `value` is, or (a class, a module) binds, a function or method of code the guard does
        not trust, or is a module of a file it does not trust."""
        kind = type_(value)
        if kind is method_type:
            value, kind = method_function(value), type_(method_function(value))
        if kind is function_type:
            return not classify(function_code(value).co_filename)[0]
        if kind is module_type:
            filename = module_dict(value).get("__file__")
            if type_(filename) is str_ and not classify(filename)[0]:
                return True
            namespace = module_dict(value)
        elif issubclass_(kind, type_):
            namespace = class_dict(value)
        else:
            return False
        for item in list_(namespace.values()):
            if type_(item) is function_type and not classify(function_code(item).co_filename)[0]:
                return True
        return False

    def changed(which):
        """The first name the snapshot bound otherwise now, or "": a namespace whose values' ids are
        those of the last check is passed over; one whose are not has each binding looked up again (an
        identity, no call) and is scanned for what was added or bound anew. The
        framework's bindings may not change; the standard library's may, to what is not untrusted code
        (`untrusted_code_in`: tests mock its functions, re-import its modules). A module may gain a
        binding of trusted code (a submodule imported since, a class a function makes on first use)
        that shadows no builtin; a class, none."""
        framework = which == "framework"
        for entry in snapshots.get(which, ()):
            name, namespace, ids, pairs, is_class = entry
            now_ids = identities(namespace)
            if now_ids == ids:
                continue
            get = namespace.get
            for index in range(len_(pairs)):
                attr, value, acts = pairs[index]
                now = get(attr, pairs)
                if now is value:
                    continue
                if (framework and acts) or (now is not pairs and untrusted_code_in(now)):
                    return name + "." + attr
                pairs[index] = (attr, now, acts)  # a new binding the rules allow, checked from now on
            known = set_(attr for attr, _, _ in pairs)
            for attr, value, acts in bound(namespace, framework):
                if attr not in known:
                    if (is_class and acts) or attr in builtin_names or untrusted_code_in(value):
                        return name + "." + attr + " (added)"
                    pairs.append((attr, value, acts))
            entry[2] = now_ids
        return ""

    plugin_codes = set()

    def on_record(event, args, caller):
        if id_(caller.f_code) not in plugin_codes:
            flag(event, caller, "a guard record from outside the guard's plugin")
        culprit = anywhere(caller, stop_at_import=False)
        if culprit is not None:
            flag(event, culprit, "untrusted code on the stack of a guard record")
        kind, fields = args[0], list_(args[1:])
        if type_(kind) is not str_ or any_(type_(f) not in (str_, int_) for f in fields):
            flag(event, caller, "a malformed guard record")
        if kind == "snapshot":
            snapshot(fields[0])
            return
        if kind == "check":
            for which in fields:
                if which not in snapshots:  # the first check of the standard library takes its snapshot
                    snapshot(which)
                what = changed(which)
                if what:
                    flag(event, caller, "replaced while tests ran: " + what)
            return
        if kind == "hooks":  # the plugin manager's hook implementations: as at the end of collection
            if not hook_tables:
                hook_tables.append(fields[0])
            elif hook_tables[0] != fields[0]:
                flag(event, caller, "hook implementations changed after collection")
            return
        if kind == "O":  # an observation: the file that raised a skip, xfail or exit, or the test's own
            fields[3] = "t" if not fields[3] or classify(fields[3])[0] else "u:" + fields[3]
        emit(kind, fields)

    handlers = {
        "open": on_open, "os.rename": on_path_change, "os.remove": on_path_change, "os.rmdir": on_path_change,
        "os.symlink": on_path_change, "os.link": on_path_change, "os.truncate": on_path_change,
        "os.chmod": on_path_change, "os.utime": on_path_change, "shutil.copyfile": on_path_change,
        "shutil.move": on_path_change,
        "sys.settrace": on_anywhere, "sys.setprofile": on_anywhere, "sys.monitoring.register_callback": on_anywhere,
        "sys.addaudithook": on_anywhere, "gc.get_objects": on_anywhere, "gc.get_referrers": on_anywhere,
        "gc.get_referents": on_anywhere, "sys._current_frames": on_anywhere, "sys._current_exceptions": on_anywhere,
        "ctypes.dlopen": on_native, "ctypes.dlsym": on_native, "ctypes.dlsym/handle": on_native,
        "ctypes.addressof": on_native, "ctypes.cdata": on_native, "ctypes.cdata/buffer": on_native,
        "ctypes.create_string_buffer": on_native, "ctypes.create_unicode_buffer": on_native,
        "ctypes.string_at": on_native, "ctypes.wstring_at": on_native, "ctypes.call_function": on_native,
        "ctypes.PyObj_FromPtr": on_native, "ctypes.set_errno": on_native, "ctypes.get_errno": on_native,
        "sys._getframe": on_reader, "object.__getattr__": on_getattr, "object.__setattr__": on_setattr,
        "code.__new__": on_actor, "function.__new__": on_actor, "marshal.loads": on_marshal, "compile": on_compile,
        "swe_rl_jax.guard": on_record,
    }
    get = handlers.get
    unframed_allowed = frozenset(("open", "compile", "marshal.loads", "object.__getattr__", "os.remove"))

    def hook(event, args):
        handler = get(event)
        if handler is None:
            return
        me = get_ident()
        if me in busy:
            return
        busy.add(me)
        try:
            try:
                caller = getframe(1)
            except ValueError_:  # no Python frame: the interpreter's own act, or a callback it was handed
                if event not in unframed_allowed:  # (a builtin registered as an exit handler, a thread's target)
                    try:
                        emit("E", (event, "<no Python frame>", 0, "a callback with no code on the stack"))
                    finally:
                        exit_now(86)  # GUARD_EXIT in harness/guard.py
                return
            handler(event, args, caller)
        finally:
            busy.discard(me)

    if config.get("plugin"):
        plugin = __import__(config["plugin"])
        todo = [v.__code__ for v in vars(plugin).values() if isinstance(v, types.FunctionType)]
        while todo:
            code = todo.pop()
            plugin_codes.add(id(code))
            todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        state["plugin"] = plugin  # holds the code objects whose ids are trusted
    # Loaded: the run goes on as if the guard's directory had never been on the path (a test that
    # reads sys.path or PYTHONPATH, or starts Python, sees the repository's own).
    own_dir = own.rstrip("/")
    sys.path[:] = [entry for entry in sys.path if entry.rstrip("/") != own_dir]
    entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if entries[0].rstrip("/") == own_dir:
        if len(entries) > 1:
            os.environ["PYTHONPATH"] = os.pathsep.join(entries[1:])
        else:
            del os.environ["PYTHONPATH"]
    emit("H", (config["mode"], "%d.%d" % sys.version_info[:2]))
    sys.addaudithook(hook)


_start()
del _start
