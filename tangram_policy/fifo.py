"""Action-level FIFO per priority within tenant quotas, best-fit placement.

The first live policy and the simulator's ``fifo`` baseline: one shared queue,
every action at its minimum units, no affinity, no elasticity. Two passes per
round: actions that fit inside their tenant's guarantee first, then borrowers
up to their limit, leaving any non-lent idle guarantee free.
"""

from __future__ import annotations

from tangram_policy.ledger import Ledger, add, fits
from tangram_policy.types import Decision, PendingAction, Placement, Snapshot


class FifoPolicy:
    name = "fifo"

    def decide(self, snapshot: Snapshot) -> Decision:
        ledger = Ledger(snapshot)
        queue = sorted(snapshot.pending, key=lambda a: (-a.priority, a.submitted_at, a.id))
        placements: list[Placement] = []
        borrowers: list[PendingAction] = []
        for action in queue:
            if ledger.within_guarantee(action.tenant, action.demand):
                if not self._place(ledger, action, placements):
                    borrowers.append(action)
            else:
                borrowers.append(action)
        for action in borrowers:
            if not ledger.within_limit(action.tenant, action.demand):
                continue
            reserved = ledger.unlent_guarantee(exclude=action.tenant)
            if reserved and not fits(add(action.demand, reserved), ledger.total_free()):
                continue
            self._place(ledger, action, placements)
        return Decision(placements=tuple(placements))

    @staticmethod
    def _place(ledger: Ledger, action: PendingAction, placements: list[Placement]) -> bool:
        node_id = ledger.best_fit(action.demand, action.type, ledger.nodes)
        if node_id is None:
            return False
        ledger.take(action.tenant, node_id, action.demand)
        placements.append(Placement(action.id, node_id, dict(action.demand)))
        return True
