"""The model adapter: a model or BUILD_DIR opened on a backend, frames made into its inputs."""
