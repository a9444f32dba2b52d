"""A dense toy reward for pipeline tests: an untrained tiny model never produces a well-formed
answer, so the real rewards are all 0 and give GRPO nothing to learn from."""
import zlib

from swe_rl_jax.rewards import register_reward


def letter_e_fraction(meta, response: str):
    return (response.count("e") / len(response) if response else 0.0), {"kind": "ok"}


register_reward("letter_e_fraction", letter_e_fraction, 0.0)


def whole_file_answer(old_files, new_files) -> str:
    """A SWE-RL answer that rewrites each file of `new_files` whole (one fenced SEARCH/REPLACE block
    per file, the paper's format; an empty SEARCH for a file `old_files` does not have)."""
    blocks = []
    for path, new in sorted(new_files.items()):
        old = old_files.get(path, "")
        search, replace = old.removesuffix("\n"), new.removesuffix("\n")
        blocks.append(f"```python\n### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```")
    return "<think>\nRewrite the files.\n</think>\n<solution>\n" + "\n".join(blocks) + "\n</solution>"


def breaking_answer(old_files, new_files) -> str:
    """A well-formed answer: the edit of `new_files`, but its first file raises on import."""
    path = sorted(new_files)[0]
    return whole_file_answer(old_files, {path: new_files[path] + "raise RuntimeError('broken on purpose')\n"})


def oracle_or_broken_tests_pass(meta, response: str):
    """`tests_pass` of an answer the response's checksum picks: the oracle edit, a breaking edit, or
    the response itself (malformed, from an untrained model). An untrained model never writes a
    well-formed answer, so this gives a GRPO test rewards of -1, 0 and 1 through the real
    execution reward."""
    from swe_rl_jax.rewards.execution import compute_execution

    answer = [whole_file_answer(meta["code_context"], meta["oracle_new_content"]),
              breaking_answer(meta["code_context"], meta["oracle_new_content"]), response][zlib.crc32(response.encode()) % 3]
    return compute_execution(meta, answer, False)


register_reward("oracle_or_broken_tests_pass", oracle_or_broken_tests_pass, -1.0)
