"""The agent's default prompts: mini-swe-agent 2.4's SWE-bench text (`config/benchmarks/
swebench_backticks.yaml`), shortened, with mini-swe-agent 1's submission (the command prints the
marker and `git add -A && git diff --cached`; the harness computes the diff itself, harness/
workspace.py, so the episode's patch is the tree's whatever the output says). Jinja2 templates, as
mini-swe-agent's: `task` is the issue text; an observation gets `output` (its `returncode`,
`output`, `exception_info`, `output_chars`, `head`)."""
from __future__ import annotations

SYSTEM_TEMPLATE = """\
You are a helpful assistant that can interact multiple times with a computer shell to solve programming tasks.
Your response must contain exactly ONE bash code block with ONE command (or commands connected with && or ||).

Include a THOUGHT section before your command where you explain your reasoning process.
Format your response as shown in <format_example>.

<format_example>
THOUGHT: Your reasoning and analysis here

```mswea_bash_command
your_command_here
```
</format_example>

Failure to follow these rules will cause your response to be rejected."""

INSTANCE_TEMPLATE = """\
<pr_description>
Consider the following PR description:
{{task}}
</pr_description>

<instructions>
# Task Instructions

You're a software engineer interacting continuously with a computer by submitting commands.
Your task is to make changes to non-test files in the current directory in order to fix the issue
described in the PR description in a way that is general and consistent with the codebase.

For each response:
1. Include a THOUGHT section explaining your reasoning and what you're trying to accomplish
2. Provide exactly ONE bash command to execute

## Recommended Workflow
1. Analyze the codebase by finding and reading relevant files
2. Create a script to reproduce the issue
3. Edit the source code to resolve the issue
4. Verify your fix works by running your script again
5. Test edge cases to ensure your fix is robust

## Command Execution Rules
- Each command runs in a new subshell: directory or environment variable changes are not persistent,
  and no process outlives its command. Files you write persist.
- Use non-interactive commands only (no editors or pagers). There is no network.
- To edit files, use for example `sed -i`, `cat <<'EOF' > file`, or a short Python script.

## Submission
When you are done, submit your changes with exactly this command (you cannot continue working after it):

```mswea_bash_command
echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached
```
</instructions>"""

# mini-swe-agent 2.4's observation_template (swebench_backticks.yaml), byte for byte, except that
# an output cut by the sandbox (over 4 MB) shows its real head (`output.head`) and length.
OBSERVATION_TEMPLATE = """\
{% if output.exception_info -%}
<exception>{{output.exception_info}}</exception>
{% endif -%}
<returncode>{{output.returncode}}</returncode>
{% if output.output_chars < 10000 -%}
<output>
{{ output.output -}}
</output>
{%- else -%}
<warning>
The output of your last command was too long.
Please try a different command that produces less output.
If you're looking at a file you can try use head, tail or sed to view a smaller number of lines selectively.
If you're using grep or find and it produced too much output, you can use a more selective search pattern.
If you really need to see something from the full command's output, you can redirect output to a file and then search in that file.
</warning>
{%- set elided_chars = output.output_chars - 10000 -%}
<output_head>
{{ output.head[:5000] }}
</output_head>
<elided_chars>
{{ elided_chars }} characters elided
</elided_chars>
<output_tail>
{{ output.output[-5000:] }}
</output_tail>
{%- endif -%}"""
