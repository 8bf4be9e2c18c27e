"""Proofs in SQL: the tenant's issuer keys and the signatures that decided approvals."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select

from tapgate.adapters.store import tables as t
from tapgate.adapters.store.sql_base import Repo
from tapgate.domain.proofs import IssuerKey, SignedDecision

_k = t.issuer_keys.c
_s = t.approval_signatures.c


class SqlProofs(Repo):
    async def issuer_keys(self) -> Sequence[IssuerKey]:
        rows = await self.conn.execute(
            self.scoped(select(t.issuer_keys)).order_by(_k.created_at.desc(), _k.kid.desc())
        )
        return [IssuerKey(r.kid, r.private_jwk, r.created_at) for r in rows]

    async def add_issuer_key(self, key: IssuerKey) -> None:
        row = {
            "kid": key.kid,
            "private_jwk": key.private_jwk,
            "created_at": key.created_at,
        }
        await self._insert(t.issuer_keys, row, "The tenant has this issuer key already.")

    async def keep_signature(self, signed: SignedDecision) -> None:
        row = {
            "approval_id": signed.approval_id,
            "device_id": signed.device_id,
            "alg": signed.alg,
            "public_key": signed.public_key,
            "signature": signed.signature,
        }
        await self._insert(t.approval_signatures, row, "This approval's signature is kept already.")

    async def signature(self, approval_id: str) -> SignedDecision | None:
        r = (
            await self.conn.execute(
                self.scoped(select(t.approval_signatures)).where(_s.approval_id == approval_id)
            )
        ).first()
        return (
            None
            if r is None
            else SignedDecision(r.approval_id, r.device_id, r.alg, r.public_key, r.signature)
        )


__all__ = ["SqlProofs"]
