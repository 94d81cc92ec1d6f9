"""PySpark applications as consumer group members (issue 11; in progress).

`filelog` is the embedded record source: a partitioned log of JSON lines in files.
"""
