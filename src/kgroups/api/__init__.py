"""What the `kgroups` command line, the kubectl plugin and the operator share: the
ConsumerGroup and Topic resources (`models`, the source of the CRDs), the offset-request
annotation a user writes and the operator executes (`offset_requests`), and
kafka-consumer-groups' reset and delete semantics with their reports (`reset`, `parse`,
`deleting`, `table`). Below all three, so none of them imports another: the operator does
not import a command line, the plugin does not import the operator.
"""
