mod request;
