"""What `kube-scale-exporter check` says about this node's image pulls."""

from __future__ import annotations

from kube_scale_exporter.collectors.imagepull.kubelet import (
    ALLOWLIST_FIELD,
    DEFAULT_VERIFICATION_POLICY,
    POLICY_FIELD,
    VERIFICATION_DISABLED,
    VERIFICATION_GATE,
    allowlisted,
)
from kube_scale_exporter.collectors.imagepull.state import PullState
from kube_scale_exporter.registry import Finding


def _age(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def advise(state: PullState) -> list[Finding]:
    """Pull progress, the kubelet's pull settings and credential re-verification, stalls,
    containerd's pull settings and missing preloaded images."""
    found = []
    waiting = len(state.queued or ())
    busy = len(state.pulls)
    if busy:
        found.append(
            Finding(
                "info",
                f"{busy} image pull(s) in progress: "
                f"{_size(sum(p.downloaded_bytes for p in state.pulls))} of "
                f"{_size(sum(p.expected_bytes for p in state.pulls))} downloaded; "
                f"oldest unfinished pull {_age(state.oldest_seconds)}",
            )
        )
    kubelet = state.kubelet
    behind_serial = bool(kubelet and kubelet.serialize and waiting and busy)
    if kubelet is None:
        if not state.kubelet_refused:
            found.append(Finding("info", f"pull settings unknown: {state.kubelet_error}"))
        else:
            found.append(
                Finding(
                    "warning",
                    f"the kubelet refuses its config file: {state.kubelet_error}",
                    REFUSED_FILE_ADVICE,
                )
            )
    elif behind_serial:
        found.append(
            Finding(
                "warning",
                f"serializeImagePulls is true and {waiting} image(s) wait for a pull slot "
                f"behind {busy} pull(s): one large image blocks every pod on this node",
                "In the kubelet config file set\n"
                "  serializeImagePulls: false\n"
                "  maxParallelImagePulls: 5   # kubelet >= 1.27; size it to the node's bandwidth\n"
                "and restart the kubelet. Bake large images into the node image "
                "(--image-pull.preload lists them).",
            )
        )
    elif kubelet.serialize:
        found.append(
            Finding(
                "info",
                "serializeImagePulls is true (the default): pulls run one "
                "at a time, so one large image delays every other pull",
            )
        )
    elif kubelet.max_parallel == 0:
        found.append(
            Finding(
                "info",
                "pulls are parallel with no maxParallelImagePulls limit: "
                "a burst of pods pulls every image at once",
            )
        )
    if state.queued is None:
        why = state.pods_error or "pod watch not synced"
        found.append(Finding("info", f"queued pulls unknown: {why}"))
    elif waiting and not behind_serial:
        found.append(
            Finding(
                "info",
                f"{waiting} image(s) needed by waiting containers are "
                f"neither present nor downloading (pull back-off, or about to "
                f"start)",
            )
        )
    if state.stalled:
        oldest = min(p.last_progress_at for p in state.stalled)
        found.append(
            Finding(
                "warning",
                f"{len(state.stalled)} image pull(s) made no progress for at least "
                f"{_age(state.stall_after)} (the longest for {_age(state.now - oldest)})",
                "containerd's CRI cancels a pull after image_pull_progress_timeout (default 5m) "
                "without progress and the kubelet retries with backoff. Check this node's path to "
                "the registry (`crictl pull` the image by hand). An ingest left by a killed "
                "client stays listed in `ctr -n k8s.io content active` until a pull of the same "
                "blob resumes it.",
            )
        )
    found += _verification(state)
    found += _containerd(state)
    found += _mirrors(state)
    if state.failing:
        found.append(
            Finding(
                "info",
                f"{state.failing} image(s) of waiting containers are in "
                f"pull back-off or failed; the cluster-mode "
                f"kubescale_image_pull_failures_total says which registry and why",
            )
        )
    if state.preload_missing:
        names = "\n".join(f"  {n}" for n in state.preload_missing)
        found.append(
            Finding(
                "warning",
                f"{len(state.preload_missing)} of {state.preload_total} images that should be "
                f"baked into this node are missing",
                f"Missing:\n{names}\nRebuild the node image with them, or pre-pull them with a "
                f"DaemonSet before scheduling workloads here.",
            )
        )
    return found


# containerd's default; it replaced dockershim's 1m progress deadline because 1m cancelled
# pulls of big images whose layers stall while the registry or the disk catches up.
BIG_IMAGE_TIMEOUT = 300.0


def _containerd(state: PullState) -> list[Finding]:
    """containerd's pull settings against what big images need and --image-pull.stall-after."""
    settings = state.containerd
    if settings is None:
        return [Finding("info", f"containerd pull settings unknown: {state.containerd_error}")]
    timeout = settings.progress_timeout
    # 0 is also containerd 1.6, which has no such timeout at all.
    never = "none: a pull that stops moving is never cancelled (the stall alert is the signal)"
    shown = "unknown" if timeout is None else never if timeout == 0 else _age(timeout)
    how = ""
    if settings.transfer:
        how = ", through its transfer service"
    elif settings.fallback:
        how = (
            f", the CRI's own pull: {settings.fallback} in the CRI images plugin is a "
            "setting the transfer service lacks, so containerd falls back from it"
        )
    found = [
        Finding(
            "info",
            f"containerd pulls {settings.max_concurrent_downloads or 'all'} "
            f"layer(s) at once ({settings.downloads_key}{how}); progress timeout {shown}",
        )
    ]
    if settings.missing:
        found.append(
            Finding(
                "info",
                "containerd config imports not found (containerd does not start without "
                "them: check they are mounted): " + ", ".join(settings.missing),
            )
        )
    if timeout is not None and 0 < timeout < BIG_IMAGE_TIMEOUT:
        found.append(
            Finding(
                "warning",
                f"image_pull_progress_timeout is {_age(timeout)}: a big image whose layer "
                f"makes no progress that long is cancelled and pulled again from the start",
                'Set image_pull_progress_timeout = "5m" or more in containerd\'s CRI config '
                "(versions 3 and 4: [plugins.'io.containerd.cri.v1.images']; version 2: "
                '[plugins."io.containerd.grpc.v1.cri"]) and restart containerd.',
            )
        )
    if timeout and state.stall_after > timeout / 2:
        found.append(
            Finding(
                "warning",
                f"--image-pull.stall-after ({_age(state.stall_after)}) is not well inside "
                f"containerd's progress timeout ({_age(timeout)}): a stalled pull is cancelled "
                f"before, or just after, this exporter calls it stalled",
                f"Set --image-pull.stall-after to at most {_age(timeout / 2)}.",
            )
        )
    return found


REFUSED_FILE_ADVICE = (
    "The kubelet reads this file only when it starts: it runs on with what it read then, "
    "and will not start again with the file as it is. Correct what the error names, check "
    "that `kubelet --config` starts with it, then restart the kubelet. Until then the "
    "kubelet's pull settings are not exported for this node."
)

# What a re-verification costs, said once wherever a policy makes them.
REVERIFY_COST = (
    "A re-verification is a pull through the CRI: containerd asks the registry for the "
    "manifest (and a token), finds the layers present and downloads nothing. It takes one "
    "of the kubelet's pull slots (with serializeImagePulls it waits behind any pull in "
    "progress), and if the registry refuses it (rate limit, outage) the pod fails with "
    "ErrImagePull although the image is on the node (ErrImageNeverPull under "
    "imagePullPolicy: Never). Behind one NAT address every node's re-verifications count "
    "against the same per-address registry quota."
)


def _allowlist_yaml(patterns) -> str:
    lines = [f"  {POLICY_FIELD}: NeverVerifyAllowlistedImages", f"  {ALLOWLIST_FIELD}:"]
    return "\n".join(lines + [f"  - {p}" for p in patterns])


def _verification(state: PullState) -> list[Finding]:
    """KEP-2535's credential re-verification: which images already on this node the
    kubelet checks against their registry again, and what that costs a fleet."""
    kubelet = state.kubelet
    if kubelet is None:
        return []
    policy = kubelet.verification_policy
    if policy == VERIFICATION_DISABLED:
        return [
            Finding(
                "info",
                f"featureGates.{VERIFICATION_GATE} is false in the kubelet config: no image "
                f"already on this node is checked against its registry again, and any pod "
                f"here can use any image present, whatever its pull secret",
            )
        ]
    if policy == "NeverVerify":
        return [
            Finding(
                "info",
                f"{POLICY_FIELD} is NeverVerify: an image already on this node is never checked "
                f"against its registry again (no registry request), and any pod here can use "
                f"it, whatever its pull secret",
            )
        ]
    if policy == "NeverVerifyPreloadedImages":
        default = "" if kubelet.policy_set else " (the default)"
        return [
            Finding(
                "info",
                f"{POLICY_FIELD} is NeverVerifyPreloadedImages{default}: images baked into the "
                f"node image are used without asking the registry; an image the kubelet pulled "
                f"with a pull secret is checked against its registry again when a pod with "
                f"other credentials first uses it here (once per node, image and credential; "
                f"pulls without credentials or with the node's own are never checked again)",
                REVERIFY_COST,
            )
        ]
    preload = state.preload_repositories
    if policy == "NeverVerifyAllowlistedImages":
        count = len(kubelet.allowlist)
        exposed = [r for r in preload if not allowlisted(kubelet.allowlist, r)]
        summary = (
            f"{POLICY_FIELD} is NeverVerifyAllowlistedImages with {count} "
            f"{ALLOWLIST_FIELD} pattern(s): only images they match are used without "
            f"asking the registry; every other image present, baked-in ones included, is "
            f"checked against its registry when a pod first uses it on this node (and for "
            f"each new credential)"
        )
        if not exposed:
            return [Finding("info", summary, REVERIFY_COST)]
        listed = [*kubelet.allowlist, *exposed]
        return [
            Finding("info", summary),
            Finding(
                "warning",
                f"{len(exposed)} of the {len(preload)} images of --image-pull.preload are not "
                f"in {ALLOWLIST_FIELD}: each node checks them against their registry at first "
                f"use, so a scale-up of N nodes makes N requests each, the burst the baked-in "
                f"images were meant to avoid",
                "Not allowlisted:\n"
                + "\n".join(f"  {r}" for r in exposed)
                + "\n"
                + REVERIFY_COST
                + "\nIn the kubelet config file set\n"
                + _allowlist_yaml(listed)
                + "\n(names without tag or digest, matched as pods write them: `nginx` is not "
                "`docker.io/library/nginx`; `HOST/*` covers a registry) and restart the kubelet.",
            ),
        ]
    # AlwaysVerify
    summary = (
        f"{POLICY_FIELD} is AlwaysVerify: every image present without a pull record of the "
        f"kubelet's, baked-in ones included, is checked against its registry when a pod first "
        f"uses it on this node, and again for each new credential"
    )
    advice = (
        REVERIFY_COST
        + "\nIf tenants need not be kept from each other's baked-in images, exempt them in "
        "the kubelet config file:\n"
        + _allowlist_yaml(preload or ["registry.example/team/image", "registry.example/*"])
        + "\nor go back to the default (remove the line, or set\n"
        f"  {POLICY_FIELD}: {DEFAULT_VERIFICATION_POLICY}\n) and restart the kubelet."
    )
    if not preload:
        return [Finding("info", summary, advice)]
    return [
        Finding(
            "warning",
            f"{summary}; the {len(preload)} image(s) of --image-pull.preload included, so a "
            f"scale-up of N nodes makes N registry requests for each, the burst the baked-in "
            f"images were meant to avoid",
            advice,
        )
    ]


def _registry_table(settings) -> str:
    """Where the CRI's registry settings go in this config's version."""
    if settings.config_version >= 3:
        return "[plugins.'io.containerd.cri.v1.images'.registry]"
    return '[plugins."io.containerd.grpc.v1.cri".registry]'


def _fix(d, settings, dirs) -> str:
    """The one change that makes containerd read directory `d`, in its config's syntax."""
    table = _registry_table(settings)
    one_dir = (
        f"In containerd's config ({settings.files[0] if settings.files else 'config.toml'}) "
        f'set\n  {table}\n    config_path = "{d.root}"\nand restart containerd'
    )
    if d.reason == "transfer_path_colon_list":
        text = (
            f"containerd 2's transfer service reads config_path ({dirs.config_path}) as one "
            "directory, a path that does not exist, so every pull goes to the upstream "
            f"registry. {one_dir} (one directory: both pulls read it)."
        )
        if settings.config_version >= 3:
            text += (
                "\nOr keep the list and let the CRI pull itself, which splits it:\n"
                "  [plugins.'io.containerd.cri.v1.images']\n    use_local_image_pull = true"
            )
        if dirs.set_by == "default":
            text += (
                "\n(config_path is not set: since 2.2 containerd's built-in default is "
                "/etc/containerd/certs.d:/etc/docker/certs.d, Docker's directory added "
                "for compatibility, which the transfer service cannot read.)"
            )
        return text
    if d.reason == "no_config_path":
        if settings.pull_reason == "registry_mirrors":
            return (
                "Legacy registry.mirrors are set, so containerd reads no host directory "
                "(and refuses config_path beside them). Move each mirror into "
                f"{d.root}/<registry>/hosts.toml, remove registry.mirrors, then: {one_dir}."
            )
        return f"config_path is empty, so containerd reads no host directory. {one_dir}."
    if d.reason == "not_in_config_path":
        return (
            f"containerd reads {dirs.config_path}, not {d.root}: move the directory there, or "
            f"{one_dir[0].lower()}{one_dir[1:]}."
        )
    if d.reason == "shadowed":
        return (
            f"An earlier directory of config_path ({dirs.config_path}) has {d.name} or "
            "_default, and the first one found wins: merge the two and remove the other."
        )
    if d.reason == "hosts_toml_invalid":
        return f"containerd logs the error and skips the file: {d.error}"
    if d.reason == "unreadable":
        return f"Not read by this exporter: {d.error} (check what is mounted in its pod)."
    return (
        "Which directories containerd reads depends on its version, not known here: give "
        "the exporter --containerd.binary (containerd's binary, mounted read-only), or "
        f"make it the same on every version: {one_dir}."
    )


def _mirrors(state: PullState) -> list[Finding]:
    """Per registry host directory: will containerd use its mirrors, and if not, the one
    change that makes it."""
    settings, dirs = state.containerd, state.host_dirs
    if settings is None or dirs is None:
        return []
    found = [
        Finding(
            "info",
            f"containerd pulls through its {settings.pull_path} path "
            f"({settings.pull_reason}); registry config_path "
            f"{dirs.config_path if dirs.config_path is not None else 'unknown'} "
            f"({dirs.set_by})",
        )
    ]
    for problem in dirs.problems:
        found.append(Finding("warning", f"registry host directory not read: {problem}"))
    for root in dirs.missing_roots:
        found.append(
            Finding(
                "info",
                f"config_path lists {root}, which is not there (not mounted in this pod?)",
            )
        )
    for d in dirs.dirs:
        who = f", written by {d.writer}" if d.writer != "other" else ""
        where = f"{d.root}/{d.name}"
        if d.verdict == "used":
            tail = "" if d.upstream_last else "; the registry itself is never tried (server)"
            found.append(Finding("info", f"{where}: {d.mirrors} mirror(s){who}, used{tail}"))
        elif d.mirrors or d.reason in ("hosts_toml_invalid", "unreadable"):
            found.append(
                Finding(
                    "warning",
                    f"{where}: {d.mirrors} mirror(s){who}, that containerd "
                    f"{'ignores' if d.verdict == 'ignored' else 'may ignore'} ({d.reason})",
                    _fix(d, settings, dirs),
                )
            )
    if dirs.unlisted:
        found.append(Finding("info", f"{dirs.unlisted} more registry host directories not listed"))
    return found
