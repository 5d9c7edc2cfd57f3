"""explain's SQL: one row per explained cause, and the explanation stored with each verdict.

``explanations`` keeps what the model answered for a cause (its key, the
project, the answer, the model, tokens and cost): when Redis forgets, a cause
is still paid once. ``verdicts.explanation`` is what the failure's verdict
shows (an answer, or why there is none).
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite

from theow_client.verdict import Verdict
from theow_workers.core.ports import EXPLAINED, Explanation
from theow_workers.store.results import SqlStore, _stored_verdict
from theow_workers.store.schema import ExplanationRow, VerdictRow


class ExplanationStore:
    """The ExplanationStore port (``core.llm.explanation``) on the result store's database."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.engine = store.engine

    def explanation(self, cause: str) -> Explanation | None:
        """The cause's explanation, when the model answered it (a malformed one is asked again)."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(ExplanationRow).where(
                    ExplanationRow.cause == cause, ExplanationRow.state == EXPLAINED
                )
            ).first()
        if row is None:
            return None
        return Explanation(
            row.state,
            row.text,
            row.cause_class,
            row.next_step,
            row.model,
            row.reason,
            row.tokens_in,
            row.tokens_out,
            row.cost,
        )

    def save_explanation(self, cause: str, project: str, explanation: Explanation) -> None:
        values = {
            "cause": cause,
            "project": project,
            "state": explanation.state,
            "text": explanation.text,
            "cause_class": explanation.cause,
            "next_step": explanation.next_step,
            "model": explanation.model,
            "reason": explanation.reason,
            "tokens_in": explanation.tokens_in,
            "tokens_out": explanation.tokens_out,
            "cost": explanation.cost,
            "created_at": datetime.now(UTC),
        }
        dialect = postgresql if self.engine.dialect.name == "postgresql" else sqlite
        changed = {k: v for k, v in values.items() if k != "cause"}
        statement = (
            dialect.insert(ExplanationRow)
            .values(**values)
            .on_conflict_do_update(index_elements=["cause"], set_=changed)
        )
        with self.engine.begin() as conn:
            conn.execute(statement)

    def attach_explanation(self, failure_id: str, explanation: Explanation) -> Verdict | None:
        with self.engine.begin() as conn:
            conn.execute(
                update(VerdictRow)
                .where(VerdictRow.failure_id == failure_id)
                .values(explanation=explanation.shown())
            )
            return _stored_verdict(conn, failure_id)
