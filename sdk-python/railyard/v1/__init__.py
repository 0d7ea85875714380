"""The generated gRPC stubs of proto/railyard/v1 (package railyard.v1)."""
