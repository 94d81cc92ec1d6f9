"""`kubectl kgroups`: the `kgroups group` verbs on ConsumerGroup resources, as a kubectl plugin.

Installed as the `kubectl-kgroups` console script, which kubectl finds on PATH. It reads
ConsumerGroups through kubectl itself (`kube`), with the user's kubeconfig, context and
credentials, and never reaches the coordinator: offset resets and deletions are requests
written on the ConsumerGroup, executed and recorded there by the operator
(`kgroups.api.offset_requests`). Modules: `app` (the commands), `kube` (running kubectl),
`submit` (writing a request and waiting for its record), `views` (what is printed).
"""

from kgroups.kubectl.app import main

__all__ = ["main"]
