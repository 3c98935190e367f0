"""The one input policy of every command that reads manifests or a live cluster.

- `-f` files, directories, stdin ('-'), `List` kinds, JSON and YAML: `gpudra.api.load` reads them;
  every file that cannot be read is reported (the rest are still read first), and input without a
  single Kubernetes object is an error, never "0 documents, valid".
- Without `-f`, the cluster of the kubeconfig (read-only), with kubectl's `--kubeconfig`, `--context`
  and a finite `--request-timeout`.
- Manifests that fail `gpudra validate` stop `allocate`, `schedule` and `explain` alike with the same
  messages (exit 1); `--no-validate` lets them through. Objects read from a cluster were validated by
  its API server already.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from gpudra.cli.errors import InputError, InvalidInput, UsageError

if TYPE_CHECKING:
    from gpudra.api.load import Document
    from gpudra.api.problems import Problem

CLUSTER_SOURCE = "<cluster>"


def read_documents(paths: Iterable[str]) -> list[Document]:
    """Every document in the files; InputError listing every file that could not be read."""
    from gpudra.api.load import LoadError, LoadErrors, freeze_input, load_paths

    try:
        documents = load_paths(list(paths))
    except LoadErrors as exc:
        lines = [str(error) for error in exc.errors]
        raise InputError(lines[0], details=[f"error: {line}" for line in lines[1:]]) from None
    except LoadError as exc:
        raise InputError(str(exc)) from None
    # The command keeps what it read until it ends: out of the cycle collector's sight, later collections need not
    # walk it again and again (a fifth of `allocate`'s time on 2,000 nodes), and they may come less often: the
    # allocator and scheduler build a few hundred thousand small containers, none of them garbage until the end.
    # LazyGroup.invoke unfreezes and restores the threshold when the command ends.
    freeze_input()
    first, *older = gc.get_threshold()
    gc.set_threshold(max(first, 5000), *older)
    return documents


def validation_errors(documents: list[Document], release: str | None = None, features: Any = None) -> list[str]:
    """`gpudra validate --kubernetes-version RELEASE`'s errors for the documents, rendered (the gate warnings,
    for the command's release, are gate_warnings)."""
    from gpudra.cli.background import error_lines
    from gpudra.cli.progress import progress

    with progress() as bar:  # thousands of slices take seconds
        return error_lines(documents, bar, release=release, features=features)


def require_valid(documents: list[Document], command: str, no_validate: bool = True,
                  release: str | None = None) -> None:
    """InvalidInput (exit 1) with `gpudra validate`'s messages when any document has an error;
    `no_validate`: the command has the --no-validate escape hatch (and says so); `release`: the Kubernetes
    release whose rules apply (where a ResourceSlice's counter sets may live differs)."""
    problems = validation_errors(documents, release)
    if problems:
        raise invalid_input(problems, command, no_validate)


@contextmanager
def validated_alongside(documents: list[Document], command: str, validate: bool = True,
                        no_validate: bool = True, release: str | None = None,
                        features: Any = None) -> Iterator[Callable[[], None]]:
    """`with validated_alongside(documents, "schedule") as check:` around the command's work, before it prints
    anything: require_valid's refusal, but validation runs during the work where a second core can take it
    (gpudra.cli.background). `check()` stops the work early once the input is known to be invalid; call it
    from the work's progress callback. Read with `read_inputs(…, validate=False)`; documents from a live
    cluster are not validated again, and `validate` False (--no-validate) validates nothing."""
    from gpudra.cli.background import Alongside, ValidationFailed

    manifests = [document for document in documents if document.source != CLUSTER_SOURCE] if validate else []
    try:
        with Alongside(manifests, lambda docs: validation_errors(docs, release, features), release, features) as check:
            yield check
    except ValidationFailed as failed:
        raise invalid_input(failed.lines, command, no_validate) from None


def checked_progress(report: Callable[[str, int, int], None],
                     check: Callable[[], None]) -> Callable[[str, int, int], None]:
    """A progress callback that first lets validated_alongside stop invalid input's work."""
    def callback(label: str, done: int, total: int) -> None:
        check()
        report(label, done, total)

    return callback


def invalid_input(problems: list[str], command: str, no_validate: bool = True) -> InvalidInput:
    hatch = "; --no-validate goes on anyway" if no_validate else ""
    trailer = (f"{len(problems)} validation error(s): {command} refuses invalid input "
               f"(`gpudra validate` explains them{hatch})")
    return InvalidInput(problems[0], details=[*(f"error: {line}" for line in problems[1:]), trailer])


def read_inputs(paths: Iterable[str], kubeconfig: str | None = None, context: str | None = None,
                request_timeout: float | None = None, *, validate: bool = True,
                command: str = "gpudra", has_no_validate: bool = True, release: str | None = None) -> list[Document]:
    """Documents from `-f` (validated unless `validate` is False) or, without `-f`, from the cluster;
    `has_no_validate`: the command offers --no-validate (and its refusal says so)."""
    paths = list(paths)
    if paths and (kubeconfig or context):
        raise UsageError("use either -f (manifests) or --kubeconfig/--context (a live cluster), not both")
    if paths:
        documents = read_documents(paths)
        if validate:
            require_valid(documents, command, has_no_validate, release)
        return documents
    from gpudra.api.load import Document
    from gpudra.kube.reader import ClusterReadError, read_cluster

    try:
        objects = read_cluster(kubeconfig=kubeconfig, context=context, request_timeout=request_timeout)
    except ClusterReadError as exc:
        raise InputError(str(exc)) from None
    return [Document(obj, CLUSTER_SOURCE, index) for index, obj in enumerate(objects, start=1)]


def read_objects(paths: Iterable[str], kubeconfig: str | None = None, context: str | None = None,
                 request_timeout: float | None = None, *, validate: bool = True,
                 command: str = "gpudra") -> list[dict[str, Any]]:
    """As read_inputs, the objects converted to resource.k8s.io/v1 (see v1_objects)."""
    return v1_objects(read_inputs(paths, kubeconfig, context, request_timeout, validate=validate, command=command))


def v1_objects(documents: Iterable[Document]) -> list[dict[str, Any]]:
    """The documents' objects converted to resource.k8s.io/v1 where the api package knows how; objects already in
    v1 are handed on as they are (documents just read: nobody else holds them, and copying 2,000 ResourceSlices
    costs more than validating them)."""
    from gpudra.api.convert import needs_conversion, to_v1

    return [to_v1(document.obj) if needs_conversion(document.obj) else document.obj for document in documents]


def require_generated_valid(objects: list[dict[str, Any]], command: str, release: str | None = None) -> None:
    """Objects a generator (`driver slices`, `driver deviceclasses`, `mig slices`) is about to print must pass
    `gpudra validate`: options that would make them invalid are a usage error, not output to apply."""
    from gpudra.api.load import Document

    from gpudra.cli.background import error_lines

    documents = [Document(obj, f"<{command}>", index) for index, obj in enumerate(objects, start=1)]
    lines = error_lines(documents, render=False, release=release)
    if lines:
        raise UsageError(f"these options give objects that the API server would refuse: {lines[0]}",
                         details=[f"error: {line}" for line in lines[1:]])


def release_and_features(kubernetes_version: str | None, features: Any = "default", paths: Iterable[str] = (),
                         kubeconfig: str | None = None, context: str | None = None,
                         request_timeout: float | None = None, allocator_name: str | None = None) -> tuple[str, Any]:
    """(release, allocator Features) of `--kubernetes-version` and `--features`: the flag, else a live
    cluster's /version, else 1.36 (gpudra.versions); `--features` over that release's defaults. The flag's own
    spelling picks the patch release's allocator fixes ('1.36.3'; gpudra.versions.allocator_fixes)."""
    from gpudra.allocator.features import Features
    from gpudra.kube.inputs import kubernetes_version as release_of

    try:
        version = release_of(kubernetes_version, paths, kubeconfig, context, request_timeout)
    except InputError as exc:
        raise (UsageError if kubernetes_version is not None else InputError)(str(exc)) from None
    if features == "default" and not list(paths):  # a live cluster: the gates its API server runs with
        features = _live_features(kubeconfig, context, request_timeout)
    try:
        release = kubernetes_version if kubernetes_version is not None else version
        return version, Features.parse(features, release).with_variant(allocator_name)
    except ValueError as exc:
        raise UsageError(f"--features: {exc}") from None


def _live_features(kubeconfig: str | None, context: str | None, request_timeout: float | None) -> str:
    """--features as the live API server's gates say (its /metrics); the release's defaults, with a warning,
    when they may not be read."""
    import sys

    from gpudra.kube.reader import ClusterReadError, read_feature_gates
    from gpudra.versions import features_from_gates

    try:
        gates = read_feature_gates(kubeconfig, context, request_timeout=request_timeout)
    except ClusterReadError as exc:
        if getattr(exc, "status", None) != 404:  # 404: a server (or proxy) without metrics: nothing to say there
            sys.stderr.write(f"warning: the API server's feature gates could not be read ({exc}); assuming the "
                             "release's defaults (pass --features to name them)\n")
        return "default"
    return features_from_gates(gates)


def gate_warnings(documents: list[Document], version: str, features: Any = None) -> list[Problem]:
    """Manifest fields behind a feature gate that `version` leaves off, or `features` (the gates of `--features`
    or of the local cluster) turns off (the cluster's own objects already went through its API server)."""
    from gpudra.api.validate import gate_problems

    return [problem for document in documents if document.source != CLUSTER_SOURCE
            for problem in gate_problems(document, version, features=features)]
