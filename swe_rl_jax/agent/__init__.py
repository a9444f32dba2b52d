"""The multi-turn software agent (docs/AGENT.md): its sandboxed environment, action protocol,
episode driver and trajectory schema. Only the action protocol (`actions.py`) exists so far.
"""
