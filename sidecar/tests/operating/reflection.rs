//! gRPC reflection on the run listener, read with the reflection protocol's
//! own client: what `grpcurl -plaintext ADDR list` shows.

use crate::support::{SidecarProcess, channel, shared_cache};
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

async fn ask(address: &str, request: MessageRequest) -> MessageResponse {
    let mut client = ServerReflectionClient::new(channel(address).await);
    let request = ServerReflectionRequest { host: String::new(), message_request: Some(request) };
    let mut responses = client.server_reflection_info(tokio_stream::iter([request])).await.unwrap().into_inner();
    responses.message().await.unwrap().expect("one answer").message_response.expect("with content")
}

#[tokio::test]
async fn reflection_lists_the_sidecar_health_and_reflection_and_describes_the_sidecar() {
    let sidecar = SidecarProcess::start(&shared_cache(), &[]);
    let MessageResponse::ListServicesResponse(list) =
        ask(&sidecar.address, MessageRequest::ListServices(String::new())).await
    else {
        panic!("expected the list of services");
    };
    let mut names: Vec<_> = list.service.into_iter().map(|service| service.name).collect();
    names.sort();
    assert_eq!(names, ["grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "tether.v1.Sidecar"]);

    let MessageResponse::FileDescriptorResponse(files) =
        ask(&sidecar.address, MessageRequest::FileContainingSymbol("tether.v1.Sidecar".into())).await
    else {
        panic!("expected the file that defines `tether.v1.Sidecar`");
    };
    use prost::Message as _;
    let file = prost_types::FileDescriptorProto::decode(files.file_descriptor_proto[0].as_slice()).unwrap();
    assert_eq!(file.name(), "tether/v1/tether.proto");
    let methods: Vec<_> = file.service[0].method.iter().map(|method| method.name()).collect();
    assert_eq!(methods, ["Run", "Describe"]);
}
