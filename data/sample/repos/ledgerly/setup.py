from setuptools import find_packages, setup

setup(
    name="ledgerly",
    version="1.2.0",
    packages=find_packages(exclude=["tests"]),
    python_requires=">=3.8",
)
