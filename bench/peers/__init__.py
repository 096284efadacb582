"""One adapter per library, all with the same few methods (see base.Peer)."""

from __future__ import annotations

from peers.base import Peer


def all_peers() -> list[Peer]:
    from peers.celery import CeleryPeer
    from peers.django_ox import DjangoOxPostgres, DjangoOxSQLite
    from peers.huey import HueyPeer
    from peers.leased import LeasedMariaDB, LeasedPostgres, LeasedSQLite
    from peers.oban_py import ObanPeer
    from peers.pgqueuer import PgQueuerPeer
    from peers.procrastinate import ProcrastinatePeer
    from peers.rq import RQPeer

    return [LeasedPostgres(), ProcrastinatePeer(), PgQueuerPeer(), ObanPeer(), DjangoOxPostgres(), RQPeer(),
            CeleryPeer(), LeasedSQLite(), HueyPeer(), DjangoOxSQLite(), LeasedMariaDB()]
