"""Tests of ``studies/``: make validate, the rehearsals, the LongCE demo and the small-model builder."""
