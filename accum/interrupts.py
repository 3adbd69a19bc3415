"""One signal policy for every ``accum`` command: SIGINT (Ctrl-C) and SIGTERM are recorded by the handler and
turned into ``KeyboardInterrupt`` only at a safe point, never inside native code.

Why: a Python signal handler runs at the next bytecode of the main thread, wherever that is -- also in Python code
that a C extension runs while it is being imported (torch's ``_C``, scipy's pybind11 modules import Python modules
from C++).  An exception raised there crosses C++ frames that cannot carry it: the process aborts ("terminate
called after throwing pybind11::error_already_set"), the import fails with an ``ImportError`` traceback, or the
extension swallows it and the signal is lost.

The policy (``SignalPolicy``):

* The handler records the first signal's number (the exit status is 128 + it: 130 for SIGINT, 143 for SIGTERM).
* As the process's own policy (``exit_line`` given: the ``accum`` command, not a test calling ``main``), a signal
  ends the process at once (``os._exit``), with that one line on stderr, unless some code holds interrupts
  (``holding_interrupts``: a process pool whose workers must be stopped, a command that reports what it kept).
  Before ending, it removes the scratch paths registered by the code running (``scratch_paths``: a result's
  temporary file, the folders made for it), so nothing is left.  Raising instead, at a safe point (below), took up
  to 2 s at load: waiting for torch's ``_C`` initialisation, which hosts most of torch's import, to end; or tracing
  scipy's import to its next safe line, which the trace function itself slowed.  Only code that holds interrupts,
  and library use (no ``exit_line``), gets the ``KeyboardInterrupt`` of the rules below.
* It raises ``KeyboardInterrupt`` only at a safe point (``safe_point``): where no native frame can lie between the
  interrupted frame and accum's own code, and the frame is not itself inside a native call.  A handler also runs
  inside native code that checks for signals (``PyErr_CheckSignals``: C++ waiting, reading, calling back), where
  the interrupted frame is the Python frame that made the call -- raising there aborted torch's C++ import of
  ``torch.distributed`` once in ~50 signals at load.  So the handler raises at once only where the frame is between
  two bytecodes (``between_bytecodes``: a loop's jump back, a function's entry) or in the standard library (whose
  native calls are CPython's own: a lock's wait, a sleep); elsewhere it traces the main thread
  (``sys.settrace``: accum's frames and module-level code only) and raises at the next line that starts in a safe
  frame -- a line starts only when no native call of that frame is running.  Python does not show native frames, so the rule is built from what
  only Python can have called: accum's own code (never a callback of native code), module-level code and the
  import machinery of a Python ``import`` (importlib undoes a half-imported module, so most of torch's two seconds
  of start-up are safe points), but not an extension module's initialisation (``inside_native_import``) nor a
  library function, which C++ may have called (torch's lazy ``__getattr__`` imports are such calls).  Nor while a
  ``KeyboardInterrupt`` is being handled (``interrupt_in_flight``: its cleanup -- temporary files removed, pool
  workers stopped -- runs undisturbed).
* A signal that arrives while the main thread is inside one long native call (a numpy loop over a 134 MB array, a
  BLAS product, a torch kernel: seconds on a loaded machine, with no bytecode to run the handler at) is seen at
  once by a second thread (``_watch``): the interpreter's C-level handler writes the signal's number to a wakeup
  pipe (``set_wakeup_fd``) that this thread waits on.  As the process's own policy, if the main thread has not
  handled a signal ``NATIVE_GRACE_S`` later and nothing holds interrupts, this thread ends the process the same
  way (scratch paths removed, the one line, 128 + the signal); it runs when the native call lets go of the GIL,
  which numpy, BLAS and torch do for their long loops.  A native call that keeps the GIL (an extension module's
  initialisation) still delays the exit to its end.
* From the first signal on, a watcher thread re-delivers it every ``RECHECK_S`` seconds (``_thread.interrupt_main``:
  no OS signal, so no system call of native code is interrupted) until the command has ended, so a deferred
  interrupt is raised at the first safe point after the native code returns (within one or two re-deliveries: the
  engine's Python loops are accum's code), and one that library code swallowed
  (a bare ``except:``, a ``catch (...)`` in C++, an exception "ignored" in a destructor, which
  ``sys.unraisablehook`` then leaves unprinted) is raised again.  Nothing is lost.
* A SIGINT that the process inherited ignored (a background job ``cmd &`` of a non-interactive shell script, where
  POSIX has the shell ignore SIGINT so that a Ctrl-C meant for the script's foreground does not reach its
  background jobs) stays ignored, as Python itself leaves it; SIGTERM (``kill PID``, ``timeout``'s default) is
  always handled.

Only the interpreter's start-up, before ``accum.cli.main`` installs the policy, is Python's (docs/commands.md:
the measured window).  Long native calls cannot be interrupted by any handler; the engine cuts its work into calls
of a few hundredths of a second (``accum.simulations.params.PIECE_FLOPS``).

This module imports only built-in modules and two small ones (``types``, ``opcode``), so ``accum.cli`` can install
the policy within a millisecond of its start: it uses ``_signal``, the C module behind ``signal``, whose Python
wrapper would import ``enum`` (8 ms of a 25 ms start-up window on a loaded machine), and no ``typing``.
"""

from __future__ import annotations

import _signal
import _thread
import os
import sys
import time
from types import CodeType, FrameType

#: seconds between re-deliveries of a signal not yet acted on (a deferred or swallowed interrupt)
RECHECK_S = 0.05
#: seconds the main thread has to handle a signal before the wakeup thread ends the process (``_watch``): the
#: handler normally runs within a millisecond; only a long native call keeps it waiting this long
NATIVE_GRACE_S = 0.1
#: the signals the policy handles
SIGNALS = (_signal.SIGINT, _signal.SIGTERM)

_BOOTSTRAP_FILES = frozenset({"<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>"})
#: the folder of the standard library's modules (a site-packages below it holds third-party ones)
_STDLIB = os.path.dirname(os.__file__) + os.sep


def exit_status(signum: int | None) -> int:
    """The exit status of a command stopped by signal ``signum``: 128 + signum as shells report it (130 for SIGINT,
    143 for SIGTERM); 130 for an interrupt that came from no signal (a ``KeyboardInterrupt`` raised by code)."""
    return 128 + (_signal.SIGINT if signum is None else signum)


def _native_loader_codes() -> frozenset[CodeType]:
    """The code of the importlib functions that run a C extension's or a built-in module's initialisation."""
    import _frozen_importlib as bootstrap
    import _frozen_importlib_external as external

    functions = (external.ExtensionFileLoader.create_module, external.ExtensionFileLoader.exec_module,
                 bootstrap.BuiltinImporter.create_module, bootstrap.BuiltinImporter.exec_module)
    return frozenset(f.__code__ for f in functions)


def _boundary_opcodes() -> frozenset[int]:
    """The opcodes at which the interpreter runs signal handlers between two bytecodes (a function's entry, a
    loop's jump back), rather than inside a call of native code (``CALL``)."""
    import opcode

    return frozenset(opcode.opmap[name] for name in ("RESUME", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT")
                     if name in opcode.opmap)


def _python_import_codes() -> tuple[frozenset[CodeType], int]:
    """The code of ``importlib.import_module`` and the IMPORT_NAME opcode: the two ways Python code starts an
    import (``__import__`` called by native code, e.g. C++ or unpickling, is neither)."""
    import importlib
    import opcode

    return frozenset({importlib.import_module.__code__}), opcode.opmap["IMPORT_NAME"]


_NATIVE_LOADERS = _native_loader_codes()
_IMPORT_FUNCTIONS, _IMPORT_NAME = _python_import_codes()
_BOUNDARY_OPCODES = _boundary_opcodes()


def started_by_python(frame: FrameType | None) -> bool:
    """Whether ``frame`` (the caller of importlib's bootstrap) is executing an ``import`` statement or is
    ``importlib.import_module``; False for a native caller (its current instruction is a call)."""
    if frame is None:
        return False
    code = frame.f_code
    return code in _IMPORT_FUNCTIONS or code.co_code[frame.f_lasti] == _IMPORT_NAME


def inside_native_import(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs under an import that native code hosts: walking out through the callers, a frame
    of the loader of an extension or built-in module (its C initialisation is running and called back into
    Python), or an entry into importlib's bootstrap from a caller that is not a Python import."""
    while frame is not None:
        code, caller = frame.f_code, frame.f_back
        if code in _NATIVE_LOADERS:
            return True
        entry = code.co_filename in _BOOTSTRAP_FILES and (caller is None or caller.f_code.co_filename
                                                          not in _BOOTSTRAP_FILES)
        if entry and not started_by_python(caller):
            return True
        frame = caller
    return False


def ours(frame: FrameType) -> bool:
    """Whether ``frame`` runs accum's own code (or a script's top level), which native code never calls back."""
    name = frame.f_globals.get("__name__", "")
    return name == "__main__" or name == "accum" or name.startswith("accum.")


def standard_library(code: CodeType) -> bool:
    """Whether ``code`` is the standard library's (frozen, or a file of its folder outside any site-packages)."""
    name = code.co_filename
    return name.startswith("<frozen ") or (name.startswith(_STDLIB) and "-packages" not in name)


#: methods the interpreter calls from C and whose exception it replaces: in Python 3.11 ``type.__new__`` turns an
#: exception of a descriptor's ``__set_name__`` (``functools.cached_property``'s, in the standard library) into
#: ``RuntimeError("Error calling __set_name__ ...")``, so an interrupt raised there became a traceback
_WRAPPED_BY_NATIVE = frozenset({"__set_name__"})


def safe_point(frame: FrameType | None) -> bool:
    """Whether an exception raised in ``frame`` reaches accum's code through Python frames only: walking out through
    the callers to the first frame of ours (``ours``), every frame is the standard library's (the import machinery
    of an import that Python started -- no extension's initialisation, no import started by native code:
    ``inside_native_import`` --, or a wait of ``threading`` or ``concurrent.futures``), module-level code (only the
    import machinery runs it), or a function the import machinery called (a finder, a loader).  A function of a
    third-party library may have been called by its native code (torch's C++ calls its Python): not safe; nor any
    frame under a method whose exception the interpreter replaces (``_WRAPPED_BY_NATIVE``)."""
    if frame is None or inside_native_import(frame):
        return False
    while frame is not None:
        code, caller = frame.f_code, frame.f_back
        if code.co_name in _WRAPPED_BY_NATIVE:
            return False
        if ours(frame):
            return True
        called_by_machinery = caller is not None and caller.f_code.co_filename in _BOOTSTRAP_FILES
        if not (standard_library(code) or code.co_name == "<module>" or called_by_machinery):
            return False
        frame = caller
    return False


def between_bytecodes(frame: FrameType) -> bool:
    """Whether ``frame`` stands between two bytecodes (a loop's jump back, a function's entry), so no native call
    of its own is running."""
    return frame.f_code.co_code[frame.f_lasti] in _BOUNDARY_OPCODES


def interrupt_in_flight() -> bool:
    """Whether a ``KeyboardInterrupt`` is being handled here: the exception in hand (``except``, ``finally``,
    ``__exit__``), or one in the chain of exceptions it was raised while handling."""
    err: BaseException | None = sys.exception()
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, KeyboardInterrupt):
            return True
        seen.add(id(err))
        err = err.__context__
    return False


class SignalPolicy:
    """SIGINT and SIGTERM handled by the policy of the module docstring while installed (``install`` ..
    ``uninstall``); ``signum`` is the first signal received (None before one)."""

    def __init__(self, recheck_s: float = RECHECK_S, exit_line: str | None = None) -> None:
        self.recheck_s = recheck_s
        self.exit_line = exit_line
        self.signum: int | None = None
        self.holds = 0
        self.scratch: list[list[str]] = []
        self._lock = _thread.allocate_lock()
        self._ending = _thread.allocate_lock()
        self._wakeup: tuple[int, int] | None = None
        self._previous_wakeup = -1
        self._active = False
        self._settled = False
        self._tracing = False
        self._previous: dict[int, object] = {}
        self._previous_hook = sys.unraisablehook

    def install(self) -> "SignalPolicy":
        """Handle SIGTERM, and SIGINT unless it was inherited ignored; unraisable ``KeyboardInterrupt``s unprinted."""
        self._active = True
        for sig in SIGNALS:
            self._previous[sig] = _signal.getsignal(sig)
            if not (sig == _signal.SIGINT and self._previous[sig] == _signal.SIG_IGN):
                _signal.signal(sig, self._handle)
        self._previous_hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        if self.exit_line is not None:
            self._wakeup = os.pipe()
            os.set_blocking(self._wakeup[1], False)
            self._previous_wakeup = _signal.set_wakeup_fd(self._wakeup[1], warn_on_full_buffer=False)
            _thread.start_new_thread(self._watch, self._wakeup)
            os.register_at_fork(after_in_child=self._forget_wakeup)
        return self

    def _forget_wakeup(self) -> None:
        """In a forked child (no wakeup thread there): signals no longer written to the parent's wakeup pipe."""
        if self._wakeup is not None:
            self._wakeup = None
            try:
                _signal.set_wakeup_fd(-1)
            except ValueError:  # forked from another thread than the main one: the child cannot change it
                pass

    def uninstall(self, ignore: bool = False) -> None:
        """Stop re-delivering; the previous handlers back, or with ``ignore`` both signals ignored from now on (a
        process whose command has ended and only exits)."""
        with self._lock:
            self._active = False
        if self._wakeup is not None:  # the wakeup thread woken to end (it closes the pipe)
            _signal.set_wakeup_fd(self._previous_wakeup)
            os.write(self._wakeup[1], b"\0")
            self._wakeup = None
        self._stop_tracing(sys._getframe())
        for sig, handler in self._previous.items():
            _signal.signal(sig, _signal.SIG_IGN if ignore else handler)
        sys.unraisablehook = self._previous_hook

    def settle(self) -> None:
        """The command has reported its interrupt (what it kept): from now on a signal is only recorded -- no
        re-delivery, no ``KeyboardInterrupt``, no exit line -- until ``uninstall``.  Without it, a re-delivery in the
        moments between the report and ``uninstall`` found nothing holding interrupts and ended the process with
        the exit line as well: two lines for one Ctrl-C (once in a CI run of the Ctrl-C test)."""
        with self._lock:
            self._settled = True
        self._stop_tracing(sys._getframe())

    @property
    def status(self) -> int:
        """The exit status of a command this policy interrupted (``exit_status``)."""
        return exit_status(self.signum)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        """The signal handler: record; end the process at once where nothing holds interrupts (``exit_line``); else
        raise ``KeyboardInterrupt`` if this is a safe point outside native code, else trace the main thread to raise
        it at the next safe line (module docstring)."""
        if self.signum is None:
            self.signum = signum
            _thread.start_new_thread(self._redeliver, ())
        if not self._active or self._settled or frame is None or interrupt_in_flight():
            return
        if self.exit_line is not None and self.holds == 0:
            self._exit_at_once(self.signum)
        if safe_point(frame) and (between_bytecodes(frame) or standard_library(frame.f_code)):
            self._stop_tracing(frame)
            raise KeyboardInterrupt
        if not self._tracing:
            self._tracing = True
            sys.settrace(self._trace_call)
            while frame is not None:
                frame.f_trace = self._trace_line
                frame = frame.f_back

    def _exit_at_once(self, signum: int) -> None:
        """Remove the registered scratch paths (files, then the folders made for them, where empty), write
        ``exit_line`` to stderr and end the process with the status of ``signum``; no Python cleanup runs.  Done by
        one thread only: a second caller (the handler and the wakeup thread at once) waits for the end."""
        self._ending.acquire()
        for paths in list(self.scratch):
            for path in paths:
                try:
                    (os.rmdir if os.path.isdir(path) else os.unlink)(path)
                except OSError:
                    pass
        os.write(2, f"{self.exit_line}\n".encode())
        os._exit(exit_status(signum))

    def _watch(self, read_fd: int, write_fd: int) -> None:
        """Wakeup thread of the process's policy: read each signal number the C-level handler writes to the wakeup
        pipe (blocking without the GIL); for SIGINT or SIGTERM, if after ``NATIVE_GRACE_S`` the main thread's handler
        has still not run (it is inside a long native call) and nothing holds interrupts, end the process
        (``_exit_at_once``).  Ends, closing the pipe, when the policy is uninstalled."""
        while True:
            got = os.read(read_fd, 1)
            with self._lock:
                active = self._active
            if not got or not active:
                break
            if got[0] in SIGNALS:
                time.sleep(NATIVE_GRACE_S)
                if self._active and self.signum is None and self.holds == 0:
                    self._exit_at_once(got[0])
        os.close(read_fd)
        os.close(write_fd)

    def _trace_call(self, frame: FrameType, event: str, arg: object) -> object:
        """``sys.settrace`` function: trace the lines of the new frames that can be safe points themselves, accum's
        code and module-level code (tracing every line of torch's start-up would slow it several times)."""
        return self._trace_line if ours(frame) or frame.f_code.co_name == "<module>" else None

    def _trace_line(self, frame: FrameType, event: str, arg: object) -> object:
        """Local trace function: at the start of a line in a safe frame, stop tracing and raise the interrupt."""
        if event == "line" and self._active and not interrupt_in_flight() and safe_point(frame):
            self._stop_tracing(frame)
            raise KeyboardInterrupt
        return self._trace_line

    def _stop_tracing(self, frame: FrameType | None) -> None:
        """No more tracing: the thread's trace function and the frames' local ones removed."""
        if self._tracing:
            self._tracing = False
            sys.settrace(None)
            while frame is not None:
                frame.f_trace = None
                frame = frame.f_back

    def _redeliver(self) -> None:
        """Watcher thread: the recorded signal again every ``recheck_s`` seconds while the policy is installed."""
        while True:
            time.sleep(self.recheck_s)
            with self._lock:
                if not self._active or self._settled:
                    return
                _thread.interrupt_main(self.signum)

    def _unraisable(self, unraisable: object) -> None:
        """``sys.unraisablehook``: a ``KeyboardInterrupt`` of ours that a destructor or callback could not raise is
        left unprinted (the watcher raises it again); anything else goes to the previous hook."""
        if self.signum is not None and isinstance(getattr(unraisable, "exc_value", None), KeyboardInterrupt):
            return
        self._previous_hook(unraisable)


def installed_policy() -> SignalPolicy | None:
    """The ``SignalPolicy`` whose handler is installed for SIGTERM in this process, if any (the process's signal
    dispositions are where the policy lives: no module state)."""
    owner = getattr(_signal.getsignal(_signal.SIGTERM), "__self__", None)
    return owner if isinstance(owner, SignalPolicy) else None


class holding_interrupts:
    """``with holding_interrupts():`` code whose interrupt must run Python cleanup (stop pool workers, report what was
    kept): inside, a signal is always raised as ``KeyboardInterrupt`` at a safe point, never ends the process at
    once.  Nothing without an installed policy (library use)."""

    def __enter__(self) -> None:
        self.policy = installed_policy()
        if self.policy is not None:
            self.policy.holds += 1

    def __exit__(self, *exc: object) -> None:
        if self.policy is not None:
            self.policy.holds -= 1


def settle_interrupts() -> None:
    """``SignalPolicy.settle`` of the installed policy: called where a command reports its interrupt.  Nothing
    without an installed policy (library use)."""
    policy = installed_policy()
    if policy is not None:
        policy.settle()


class scratch_paths:
    """``with scratch_paths(path, ...):`` paths that exist only while the block runs (a temporary file, then the
    folders made for it, deepest first): if a signal ends the process at once inside the block, they are removed
    first (a folder only if empty).  Nothing without an installed policy (library use)."""

    def __init__(self, *paths: str | os.PathLike) -> None:
        self.paths = [os.fspath(path) for path in paths]

    def __enter__(self) -> None:
        self.policy = installed_policy()
        if self.policy is not None:
            self.policy.scratch.append(self.paths)

    def __exit__(self, *exc: object) -> None:
        if self.policy is not None:
            self.policy.scratch.remove(self.paths)
