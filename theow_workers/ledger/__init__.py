"""The ledger of job runs, fed from every door: a run's record made from what each source says.

``record`` turns what arrives (a client's ``theow.run`` report, a failure's
``run`` fact and its verdict, a forge's webhook job, a replayed history row)
into the store's ``LedgerRun``, with the repository in its verified scope and
the failure's cause and category; ``service`` writes it (``store.runs``) from
the tasks, in a line each, and never lets the ledger cost a verdict; ``tasks``
is the Celery task ``theow.run``.
"""
