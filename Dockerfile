# Multi-stage build: a static binary in a distroless image (no shell, no
# package manager), running as an unprivileged user.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# grpcnotrace: gRPC without golang.org/x/net/trace (see the Makefile's GOTAGS).
RUN CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -ldflags="-s -w" -o /out/ragtime ./cmd/ragtime

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ragtime /ragtime
COPY docs /docs
WORKDIR /data
ENV RAGTIME_DATA_DIR=/data
EXPOSE 8080
ENTRYPOINT ["/ragtime"]
CMD ["serve"]
