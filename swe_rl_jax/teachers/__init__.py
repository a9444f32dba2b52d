"""Teachers for rejection-sampled SFT: an OpenAI-compatible endpoint, a JSONL file, or our own sampler."""
from swe_rl_jax.teachers.base import Teacher, TeacherError, TeacherRequest, TeacherResponse, check_any_answered
from swe_rl_jax.teachers.jsonl_file import JsonlTeacher, TeacherFileError
from swe_rl_jax.teachers.openai_http import HttpTeacher, HttpTeacherConfig

__all__ = ["Teacher", "TeacherError", "TeacherRequest", "TeacherResponse", "check_any_answered", "JsonlTeacher", "TeacherFileError",
           "HttpTeacher", "HttpTeacherConfig"]
