"""Onboarding a whole build repository: ``survey`` finds every change it carries and says what each
becomes, ``recipes`` reads the scripts that apply diffs beside them, ``bodies`` checks a diff the
way ``apply`` reads it, ``land`` writes what the survey found into the ledger in one edit."""
