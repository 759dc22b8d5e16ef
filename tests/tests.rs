mod placeholder {}
mod mock_server;
