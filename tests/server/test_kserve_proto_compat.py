"""proto/inference/ is wire-compatible with the protocol as its reference
client ships it: every message, field (number, type, repetition), enum
value and RPC declared here exists with the same definition in
tritonclient's generated grpc_service / model_config modules."""
import pathlib

import pytest

PROTO_ROOT = pathlib.Path(__file__).resolve().parents[2] / "proto"


def compiled_descriptors(tmp_path):
    from google.protobuf import descriptor_pb2  # noqa: PLC0415
    from grpc_tools import protoc  # noqa: PLC0415
    out = tmp_path / "inference.pb"
    rc = protoc.main(["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"--descriptor_set_out={out}",
                      str(PROTO_ROOT / "inference/model_config.proto"),
                      str(PROTO_ROOT / "inference/grpc_service.proto")])
    assert rc == 0, "protoc failed on proto/inference"
    files = descriptor_pb2.FileDescriptorSet()
    files.ParseFromString(out.read_bytes())
    return files.file


def compare_message(ours, reference, path, problems):
    if reference is None:
        problems.append(f"{path}: not in the reference")
        return
    for field in ours.field:
        ref = reference.fields_by_name.get(field.name)
        repeated = field.label == field.LABEL_REPEATED
        if ref is None:
            problems.append(f"{path}.{field.name}: not in the reference")
        elif (ref.number, ref.type, ref.is_repeated) != (field.number, field.type, repeated):
            problems.append(f"{path}.{field.name}: number/type/label {field.number}/"
                            f"{field.type}/{repeated}, reference {ref.number}/{ref.type}/"
                            f"{ref.is_repeated}")
    for nested in ours.nested_type:
        if not nested.options.map_entry:
            compare_message(nested, reference.nested_types_by_name.get(nested.name),
                            f"{path}.{nested.name}", problems)
    for enum in ours.enum_type:
        compare_enum(enum, reference.enum_types_by_name.get(enum.name), f"{path}.{enum.name}",
                     problems)


def compare_enum(ours, reference, path, problems):
    if reference is None:
        problems.append(f"{path}: not in the reference")
        return
    for value in ours.value:
        ref = reference.values_by_name.get(value.name)
        if ref is None or ref.number != value.number:
            problems.append(f"{path}.{value.name}: {value.number}, reference "
                            f"{ref.number if ref else None}")


def test_inference_protos_match_the_reference_client(tmp_path):
    try:
        from tritonclient.grpc import model_config_pb2, service_pb2  # noqa: PLC0415
    except ImportError as error:
        pytest.skip(f"tritonclient[grpc] is not installed ({error})")
    problems, messages, rpcs = [], 0, 0
    for file in compiled_descriptors(tmp_path):
        reference = model_config_pb2.DESCRIPTOR if "model_config" in file.name \
            else service_pb2.DESCRIPTOR
        assert file.package == "inference"
        for message in file.message_type:
            messages += 1
            compare_message(message, reference.message_types_by_name.get(message.name),
                            message.name, problems)
        for enum in file.enum_type:
            compare_enum(enum, reference.enum_types_by_name.get(enum.name), enum.name, problems)
        for service in file.service:
            ref_service = reference.services_by_name[service.name]
            for method in service.method:
                rpcs += 1
                ref = ref_service.methods_by_name.get(method.name)
                if ref is None or (f".{ref.input_type.full_name}", f".{ref.output_type.full_name}",
                                   ref.client_streaming, ref.server_streaming) != (
                        method.input_type, method.output_type, method.client_streaming,
                        method.server_streaming):
                    problems.append(f"rpc {method.name} differs from the reference")
    assert not problems, "\n".join(problems)
    assert messages >= 30 and rpcs == 9
