"""`kgroups group`: Kafka's kafka-consumer-groups for kgroups and for Kafka clusters.

The verbs (list, describe, reset-offsets, delete, delete-offsets), their flags, columns
and messages are Kafka's, so runbooks written for Kafka work unchanged; they speak only
the Kafka protocol (`kgroups.admin.Cluster`), so they work against a Kafka cluster too.
`describe` adds what Kafka's tool cannot show of a classic group: its generation, its
leader and each member's assignment. Modules: `app` (the typer commands), `parse`
(arguments), `describe`, `reset`, `deleting` (what each verb computes and reports),
`table` (Kafka's column layout). The package itself imports nothing: the kubectl plugin
uses `describe` and `options` without the commands and the admin clients behind them.
"""
