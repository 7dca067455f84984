"""Which Flower node holds which client: the server asks each new node for its
``partition-id``, refuses a node that claims a client whose node still answers, and lets a
claimant take over once the holder is gone."""

from __future__ import annotations

import sys
import time

from fedpart.errors import FedpartError


class Membership:
    """Mixed into :class:`~fedpart.flower.server.FlowerSimulation`: the ``nodes``, ``gone``
    and ``claims`` it keeps, and ``connect``."""

    def _drop(self, node: int) -> None:
        self.gone.add(node)
        for client, held_by in list(self.nodes.items()):
            if held_by == node:
                del self.nodes[client]
                self._notice(
                    f"Flower node {node} (client {client}) did not reply; the client "
                    "fails until a SuperNode with its partition-id connects"
                )

    def _refresh(self) -> None:
        """Follow the federation: forget the nodes the SuperLink no longer lists (stopped, or
        silent for longer than Flower's heartbeat patience) and ask nodes that joined which
        client they hold."""
        from flwr.app import Message

        listed = set(self.grid.get_node_ids())
        for node in set(self.nodes.values()) - listed:
            self._drop(node)
        new = sorted(listed - set(self.nodes.values()) - self.gone - set(self.claims))
        n = self.data.num_clients
        replies = self._send({node: Message(self._content({}), node, "query") for node in new})
        for node, reply in replies.items():
            try:
                client = int(reply.content["info"]["client"])
            except (KeyError, TypeError, ValueError):
                self._notice(f"Flower node {node} did not say which client it holds; ignored")
                self.gone.add(node)
                continue
            if not 0 <= client < n:
                message = (
                    f"Flower node {node} has partition-id {client}: the config has {n} clients "
                    f"(partition-id 0..{n - 1})"
                )
                if not self.connected:
                    raise FedpartError(message)
                self._notice(message + "; ignored")
                self.gone.add(node)
                continue
            before = self.nodes.get(client)
            if before is not None and not self.connected:
                raise FedpartError(
                    f"Flower nodes {before} and {node} both have partition-id {client}: each "
                    f"of 0..{n - 1} must be held by exactly one node"
                )
            if before is not None:
                self.claims[node] = client
                self._notice(
                    f"Flower node {node} claims client {client}, which node {before} holds; "
                    "refused while that node answers"
                )
                continue
            self.nodes[client] = node
        # a claim is granted once the node holding the client is gone
        for node, client in list(self.claims.items()):
            if node not in listed:
                del self.claims[node]
            elif client not in self.nodes:
                del self.claims[node]
                self._notice(f"Flower node {node} takes over client {client}")
                self.nodes[client] = node

    def _notice(self, text: str) -> None:
        print(f"notice: {text}", file=sys.stderr)

    def connect(self) -> None:
        """Wait for one node per client and learn which client each node is."""
        n = self.data.num_clients
        deadline = time.monotonic() + self.timeout
        self._refresh()
        while len(self.nodes) < n:
            if time.monotonic() > deadline:
                missing = sorted(set(range(n)) - set(self.nodes))
                raise FedpartError(
                    f"{len(self.nodes)} of the config's {n} clients have a Flower node, none "
                    f"holds partition-id {missing[0]}; start one SuperNode per client (node "
                    f"config partition-id=0..{n - 1})"
                )
            time.sleep(1.0)
            self._refresh()
        self.connected = True
