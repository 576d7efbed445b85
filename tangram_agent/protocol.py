"""The agent <-> server websocket protocol: JSON text frames, one message each.

The agent connects to ``{server}/ws/agent/`` with ``Authorization: Bearer
<agent token>`` and speaks first. The server (apps.inventory.consumers)
imports this module so that both sides share one definition.

Agent -> server
  register   {type, protocol, node, capacity, executors, warm, labels, running,
              gpu_groups}
             ``running`` lists ``{action, attempt}`` the agent still executes
             (after a reconnect); the server re-sends every assignment of this
             node that the agent does not hold and re-queues any it thinks is
             running there but the agent no longer has. ``gpu_groups`` (from
             protocol 2) lists the node's GPU ids, one list per interconnect
             group; their count is ``capacity["gpu"]``. ``warm_slots``
             (optional) is how many warm keys the node keeps at most (its
             idle resident scorers): setting up one more evicts one.
  heartbeat  {type, running, warm}
             From protocol 4 ``warm`` lists the warm-state keys the node holds
             now (resident scorers, ``scorer:<digest>``); the server stores it
             as the node's ``warm``, which the policy places affinities on. An
             agent sends one at once when the list changes.
             From protocol 3 each ``running`` entry has the ``cpu`` the agent
             holds that run to; the server sends ``resize`` (``shrink`` to
             protocol 3 and 4) again where that is not the action's (the
             first one was lost). From protocol 6 an entry of a run with GPUs
             also has the ``gpus`` it told the run it holds, sent again alike.
  started    {type, action, attempt, started_at}
  result     {type, action, attempt, state, exit_code, stdout, stderr,
              stdout_truncated, stderr_truncated, error, started_at, finished_at}
             ``state`` is one of RESULT_STATES. Sent until acknowledged: the
             agent keeps unacknowledged results and re-sends them after a
             reconnect. The server records the first one for the attempt and
             acknowledges every copy.

Server -> agent
  registered {type, node_id, heartbeat_interval_s, lease_s}
  assign     {type, action: Assignment}
  cancel     {type, action, attempt}
  ack        {type, action, attempt}
  error      {type, message}   (then the server closes the socket; a malformed
             message's names each field at fault, e.g. "malformed result
             message: exit_code: ...", checked by apps.inventory.serializers)
  resize     {type, action, attempt, allocation, units, gpus}   (only to agents of protocol >= 5)
             The server changed a running elastic action's cores: it took some
             back for actions that wait, or gave it more while the pool is idle.
             ``allocation`` is its whole allocation from now on (only ``cpu``
             changes; memory never does), ``units`` its unit count. The
             server counts freed cores as free at once, so the agent sets the
             run's CPU limit now, or starts the run with the new allocation if
             it has not launched yet; a resize of a run it does not hold it
             ignores. A run sees more cores as a higher CPU quota: it goes
             faster if it runs more threads than it started with cores
             (``TANGRAM_CPUS`` is the figure at launch).
             From protocol 6, ``gpus`` (the ids the action holds from now on)
             may also be fewer, with ``allocation["gpu"]``: the server took
             GPUs back from a run submitted with ``may_shrink_gpus``, and
             counts them free at once. The agent tells the run by rewriting
             the file ``TANGRAM_GPUS_FILE`` names (the host ids it keeps,
             comma-separated, as ``TANGRAM_GPUS``); the run must stop using
             the others. Their device files stay bound (a mount cannot leave a
             running sandbox), so this rests on the run's word.
  shrink     the same, to agents of protocol 3 and 4, and only ever lowering
             ``cpu``: the server grows no run on their nodes.

An ``Assignment`` carries, from protocol 4, the action's ``tenant`` (its id, as
text), which keeps one tenant's resident scorer from another's samples; from
protocol 2, the GPU ids the action holds
(``gpus``, inside one group) and the batch it belongs to (``batch_id``, null
when alone, and ``batch_size``); older agents ignore both, and the server still accepts their
protocol-1 ``register``, which has no ``gpu_groups`` (so offers no GPUs).

Times are Unix seconds (float). A lease: a node whose last message is older
than ``lease_s`` is lost; its assigned and running actions go back to the queue
with ``attempt + 1``, so a late result of the old attempt is acknowledged and
ignored.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict

#: What this agent speaks; 2 added ``gpu_groups`` to ``register``, ``sent_at``
#: to ``register`` and ``heartbeat``, and ``gpus``/``batch_id``/``batch_size`` to
#: ``Assignment``; 3 added the ``shrink`` message, which the server sends only to
#: agents that registered with protocol >= 3; 4 added ``tenant`` to ``Assignment``
#: and ``warm`` to ``heartbeat``; 5 replaced ``shrink`` with ``resize``, which
#: may also raise a run's cores; 6 added ``gpus`` to ``resize`` (fewer GPUs, for
#: a run that may give them back) and to ``heartbeat``'s running entries.
PROTOCOL_VERSION = 6
#: The first protocol whose agents take ``shrink``.
SHRINK_PROTOCOL = 3
#: The first protocol whose agents take ``resize`` (and so may grow a run).
RESIZE_PROTOCOL = 5
#: The first protocol whose agents tell a run which GPUs a ``resize`` leaves it.
GPU_RESIZE_PROTOCOL = 6
#: The oldest agent protocol the server still accepts.
MIN_PROTOCOL_VERSION = 1

RESULT_STATES = ("succeeded", "failed", "timed_out", "cancelled")
ResultState = Literal["succeeded", "failed", "timed_out", "cancelled"]


class ActionRef(TypedDict):
    action: str
    attempt: int
    #: In ``running`` (protocol 3): the cores the agent holds the run to, so that
    #: the server can send again a ``resize`` that was lost.
    cpu: NotRequired[float]
    #: In ``running`` (protocol 6), of a run with GPUs: those it was told it holds.
    gpus: NotRequired[list[str]]


class Assignment(TypedDict):
    id: str
    attempt: int
    type: str
    payload: dict[str, Any]
    #: Resources reserved for this action on the node (cpu cores, memory MiB ...).
    allocation: dict[str, float]
    units: int
    timeout_s: float
    #: GPU ids reserved for this action, all in one interconnect group (protocol 2).
    gpus: NotRequired[list[str]]
    #: Shared by the members of one batch (protocol 2). Its ``batch_size``
    #: members share one member's demand (``allocation`` is a member's share):
    #: a batching executor (``reward.python``) runs them in one pass with
    #: ``allocation`` x ``batch_size``; others run them in turn, each with all of it.
    batch_id: NotRequired[str | None]
    batch_size: NotRequired[int]
    #: The action's tenant id (protocol 4).
    tenant: NotRequired[str]


class Register(TypedDict):
    type: Literal["register"]
    protocol: int
    node: str
    capacity: dict[str, float]
    executors: list[str]
    warm: list[str]
    labels: dict[str, str]
    running: list[ActionRef]
    #: GPU ids per interconnect group (protocol 2); absent or empty: no GPUs.
    gpu_groups: NotRequired[list[list[str]]]
    #: The agent's clock when it sent this (protocol 2): see ``Heartbeat.sent_at``.
    sent_at: NotRequired[float]
    #: Warm keys the node keeps at most (idle resident scorers); absent: no bound known.
    warm_slots: NotRequired[int]


class Heartbeat(TypedDict):
    type: Literal["heartbeat"]
    running: list[ActionRef]
    #: The agent's clock when it sent this (protocol 2). The server measures the
    #: agent's clock against its own and shifts a skewed agent's times.
    sent_at: NotRequired[float]
    #: Warm-state keys the node holds now (protocol 4).
    warm: NotRequired[list[str]]


class Started(TypedDict):
    type: Literal["started"]
    action: str
    attempt: int
    started_at: float


class Result(TypedDict):
    type: Literal["result"]
    action: str
    attempt: int
    state: ResultState
    exit_code: int | None
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    error: str
    started_at: float | None
    finished_at: float


class Registered(TypedDict):
    type: Literal["registered"]
    node_id: str
    heartbeat_interval_s: float
    lease_s: float


class Assign(TypedDict):
    type: Literal["assign"]
    action: Assignment


class Cancel(TypedDict):
    type: Literal["cancel"]
    action: str
    attempt: int


class Ack(TypedDict):
    type: Literal["ack"]
    action: str
    attempt: int


class Resize(TypedDict):
    #: ``shrink`` to agents of protocol 3 and 4.
    type: Literal["resize", "shrink"]
    action: str
    attempt: int
    #: The action's whole allocation from now on: only ``cpu`` (or ``gpu``) differs.
    allocation: dict[str, float]
    units: int
    #: The GPU ids it holds from now on (protocol 6; fewer only for ``may_shrink_gpus``).
    gpus: NotRequired[list[str]]


#: How a scorer's warm key starts: only the server puts one in an affinity.
SCORER_WARM_PREFIX = "scorer:"


def scorer_warm_key(tenant: str, code: str, files: Mapping[str, str]) -> str:
    """The warm-state key of a tenant's ``reward.python`` scorer (its code and files).

    The server adds it to such an action's affinity, and an agent reports it
    while it keeps that scorer resident, so that the policy places the
    scorer's next calls where it is loaded. One tenant's key never names
    another's scorer: a resident scorer has seen its tenant's samples.
    """
    text = json.dumps([tenant, code, dict(files)], sort_keys=True)
    return SCORER_WARM_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:32]


def whole_batch(assignment: Assignment) -> Assignment:
    """A batch member with the batch's whole allocation: its share x the members.

    The scheduler places a batch as one member's demand shared by its
    members; whoever runs them (one at a time, or all in one pass) may use all of it.
    """
    size = assignment.get("batch_size", 1)
    if not assignment.get("batch_id") or size <= 1:
        return assignment
    whole = {kind: amount * size for kind, amount in assignment["allocation"].items()}
    return {**assignment, "allocation": whole}
