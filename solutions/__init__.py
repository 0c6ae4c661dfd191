"""Worked solutions to the exercises that have a checker, one module per chapter.

The chapters never import these: they are for a learner who is stuck, and for the tests, which
run every checker on its solution (it must pass) and on typical wrong answers (they must fail
with the message that names the mistake). Each solution is written as a learner would write
it, without calling the helper it re-implements.
"""
