"""The verify plan, made before any engine starts: what each patch's proof rests on (``watch``), which
without-runs run tonight and why (``decide``), from a build tree (``inputs``) or the ledger alone
(``ledger``), patches tried together (``grouping``), the rounds that run it (``rounds``), carried
verdicts and recorded proofs (``carry``) and how it prints (``view``)."""
