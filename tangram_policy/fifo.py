"""Action-level FIFO per priority within tenant quotas, best-fit placement.

The first live policy and the simulator's ``fifo`` baseline: one shared queue,
every action at its minimum units, no affinity, no elasticity, GPU ids taken in
order regardless of interconnect groups. Two passes per round: actions that
fit inside their tenant's guarantee first, then borrowers up to their limit,
leaving any non-lent idle guarantee free.
"""

from __future__ import annotations

from tangram_policy.ledger import Ledger
from tangram_policy.types import Decision, PendingAction, Placement, Snapshot

Shape = tuple[str, tuple[tuple[str, float], ...]]


def _shape(action: PendingAction) -> Shape:
    return action.type, tuple(sorted(action.demand.items()))


class FifoPolicy:
    name = "fifo"

    def decide(self, snapshot: Snapshot) -> Decision:
        ledger = Ledger(snapshot)
        queue = sorted(snapshot.pending, key=lambda a: (-a.priority, a.submitted_at, a.id))
        placements: list[Placement] = []
        borrowers: list[PendingAction] = []
        # Room only shrinks within a round: a (type, demand) that found no node
        # never will, so later actions of that shape are skipped, not rescanned.
        # Likewise usage only grows: a (tenant, shape) over its guarantee or limit stays so.
        no_room: set[Shape] = set()
        over_guarantee: set[tuple[str, Shape]] = set()
        over_limit: set[tuple[str, Shape]] = set()
        shapes: dict[int, Shape] = {}
        for action in queue:
            shape = shapes[id(action)] = _shape(action)
            if shape in no_room:
                continue
            if (action.tenant, shape) not in over_guarantee and ledger.within_guarantee(
                action.tenant, action.demand
            ):
                if not self._place(ledger, action, placements, no_room):
                    borrowers.append(action)
            else:
                over_guarantee.add((action.tenant, shape))
                borrowers.append(action)
        for action in borrowers:
            shape = shapes[id(action)]
            if shape in no_room or (action.tenant, shape) in over_limit:
                continue
            if not ledger.within_limit(action.tenant, action.demand):
                over_limit.add((action.tenant, shape))
                continue
            if not ledger.leaves_unlent_guarantees(action.tenant, action.demand):
                continue
            self._place(ledger, action, placements, no_room)
        return Decision(placements=tuple(placements))

    @staticmethod
    def _place(
        ledger: Ledger,
        action: PendingAction,
        placements: list[Placement],
        no_room: set[Shape],
    ) -> bool:
        node_id = ledger.best_fit(action.demand, action.type, ledger.nodes)
        if node_id is None:
            no_room.add(_shape(action))
            return False
        gpus = ledger.first_gpus(node_id, action.demand)
        ledger.take(action.tenant, node_id, action.demand, gpus)
        placements.append(Placement(action.id, node_id, dict(action.demand), gpus=gpus))
        return True
