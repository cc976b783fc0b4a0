"""The environment of the tests' S3 server (conftest's ``s3_server``), in a module of its own so that test modules can
import it (``from conftest import`` finds tests/slurm/conftest.py first under pytest-xdist)."""

# An S3 client that finds no credentials of the user's (~/.aws) and asks no cloud metadata service for some.
S3_ISOLATED = {"AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws/credentials", "AWS_CONFIG_FILE": "/nonexistent/aws/config",
               "AWS_EC2_METADATA_DISABLED": "true", "AWS_DEFAULT_REGION": "us-east-1"}
S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}  # fake: moto takes any
