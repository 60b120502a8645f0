"""One scheduling cycle in parts (greengpu.sched.core is its entry): `vocabulary` (the kind of a job, the result),
`lending` (the lending rule as the cycle reads it), `starts` (each way one job may start, be held or reserved for),
`alike` (deciding a job and sharing its verdict with jobs alike), `known_kinds` (what the walk may skip) and `walk`
(`Cycle.run`: the steps in order). Each part is a class that adds to the one before it."""
