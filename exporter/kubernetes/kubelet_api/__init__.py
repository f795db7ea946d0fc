"""Generated gRPC stubs of the kubelet's PodResources API v1 (``api.proto`` beside this file).

Why shipped, not generated at install: installing the exporter then needs no
protoc. ``scripts/gen_podresources.sh`` regenerates ``api_pb2.py`` and
``api_pb2_grpc.py``; tests/kubernetes/test_podresources_stubs.py fails when they
no longer match ``api.proto``. Only ``exporter.kubernetes.podresources`` imports them.
"""
