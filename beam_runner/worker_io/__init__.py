"""What workers read and write: forms (`form_source`, `sandbox`), client data
(`client_data`, `tfrecords`) and tensors (`tensor_io`)."""
