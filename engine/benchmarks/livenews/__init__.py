"""livenews (LiveNewsBench): fresh news questions answered with Search / Visit / Finish over an
offline dated web, graded by the SimpleQA-style grader. Work in progress (issue 3): the data
loaders, action parser, grader and offline web are here and tested; the episode loop and
``BENCHMARK`` are not yet, so the runtime does not offer this benchmark."""
