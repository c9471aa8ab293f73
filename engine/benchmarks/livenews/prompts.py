"""The agent prompt of LiveNewsBench figure 7, verbatim except for what the PDF lost:

* the fences around action blocks, rendered as ```action ... ``` (the PDF kept only the
  word "action" of the opening fence and dropped the backticks);
* the budget placeholders "max searches" / "max clicks", filled from the agent config.

The figure has no slot for the question; it goes in the first user turn (with the question's
date when ``agent.tell_date``: RealTimeQA questions say "this week"). The no-search prompt for
the contamination ablation (Table 4) is ours: the figure's Finish section and guidelines with
Search and Click removed.
"""

from __future__ import annotations

FENCE = "```"

SEARCH_SECTION = f"""## Search
You can use this action to search online via a search engine (e.g. Google). You can perform one or multiple searches at a time.
However, you should try to minimize the total number of searches needed when possible.
This is just plain web search, so you should make sure your queries are concise and specific, similar to how you would search online on Google. The results, which includes the article title, url, and snippet, will be returned to you in the next turn as a user message. You can choose to see the full content of any article by using the "Click" action described later.
To invoke this action, use the following format:
{FENCE}action
type: Search
your query 1
your query 2
your query 3
...
{FENCE}
## Click
You can use this action to click on a search result link to see the full content of the article. You can click on one or multiple links at a time. However, you should try to minimize the total number of clicks needed when possible. The full content of the article will be returned to you in the next turn as a user message. You can only click on links that are returned from the Search action in previous turns.
To invoke this action, use the following format:
{FENCE}action
type: Click
url 1
url 2
url 3
...
{FENCE}
"""

FINISH_SECTION = f"""## Finish
You can use this action to finish the task and provide your final answer. The final answer should be a concise and complete answer to the original question, based on the information you have gathered. The final answer is usually a phrase, so a few words long. You should only use this action when you are confident that you have gathered enough information to answer the question.
To invoke this action, use the following format:
{FENCE}action
type: Finish
your final answer
{FENCE}
"""

GUIDELINES = f"""# You must follow the guidelines below exactly
## Think step by step
Please always approach the task by thinking step by step. Always think about the next action before committing to it.
So in each turn, you should first provide a couple paragraphs of reasoning about the next action you will take, and then invoke the action using:
{FENCE}action
...
{FENCE}.
## Only one action block per turn
You should only invoke one action per turn. You can indeed search and click multiple times in one action, but there should only be one action block in your response.
## Minimize total number of actions
You should try to minimize the total number of actions you take to complete the task. This means you should try to minimize the total number of action blocks you invoke, as well as the total number of searches and clicks needed before reaching the final answer.
## Respect the search and click budgets
You can perform up to {{max_searches}} searches and {{max_clicks}} clicks in total.
Each individual search queries and clicks count towards the total budget. So if you invoked search action with 3 queries, that counts as 3 searches towards your total budget. Similarly, if you clicked on 2 links in one click action, that counts as 2 clicks towards your total budget.
When you ran out of both searches and clicks, you must use the Finish action to provide your final answer.
If you exceed either budget, you will fail the task instantly.
Now, let's think step by step to determine the first action to take."""

NO_SEARCH_GUIDELINES = f"""# You must follow the guidelines below exactly
## Think step by step
Please always approach the task by thinking step by step. First provide a short paragraph of reasoning, then invoke the action using:
{FENCE}action
...
{FENCE}.
## You have no access to the Internet
Answer from your own knowledge. Use exactly one Finish action block.
Now, let's think step by step."""


def system_prompt(max_searches: int, max_clicks: int) -> str:
    return ("# Actions you can take\n" + SEARCH_SECTION + FINISH_SECTION
            + GUIDELINES.replace("{max_searches}", str(max_searches)).replace("{max_clicks}", str(max_clicks)))


def no_search_prompt() -> str:
    return "# Actions you can take\n" + FINISH_SECTION + NO_SEARCH_GUIDELINES


def question_turn(question: str, date: str | None) -> str:
    when = f"\nThe question was asked on {date}." if date else ""
    return f"# Question\n{question}{when}"


def search_results(blocks: list[tuple[str, list[tuple[str, str, str]]]]) -> str:
    """``[(query, [(title, url, snippet), ...]), ...]`` as the next user message."""
    out = []
    for query, results in blocks:
        out.append(f'## Search results for "{query}"')
        if not results:
            out.append("No results found.")
        for i, (title, url, snip) in enumerate(results, 1):
            out.append(f"{i}. {title}\nURL: {url}\nSnippet: {snip}")
    return "\n\n".join(out)



# Reasoning (at most 4 lines, no backticks), then exactly one action block with 1-8 item lines:
# the shape the figure-7 prompt asks for. Counted repetition of single characters ({1,800})
# times out in vLLM's regex compiler, so bounds are on lines; max_tokens bounds the rest.
ACTION_REGEX = r"([^`\n]*\n){1,4}```action\ntype: (Search|Click|Finish)\n([^`\n]+\n){1,8}```"
FINISH_REGEX = r"([^`\n]*\n){1,4}```action\ntype: Finish\n[^`\n]+\n```"
