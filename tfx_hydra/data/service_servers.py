"""The tf.data service processes data.service=local starts, one per process -- and what a user starts on machines of
their own for data.service=grpc://host:port:

    python -m tfx_hydra.data.service_servers dispatcher --port 5050
    python -m tfx_hydra.data.service_servers worker --dispatcher dispatcher-host:5050 --port 5051 --host this-host

Each is TensorFlow's own server (`tf.data.experimental.service.DispatchServer` / `WorkerServer`), kept in the
foreground; `--parent PID` ends it when that process ends (a run killed with -9 leaves no server behind).
"""

from __future__ import annotations

import argparse
import os
import time

WORKER_TIMEOUT_MS = 5000  # the dispatcher's wait before it counts a silent worker missing


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tfx_hydra.data.service_servers",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=["dispatcher", "worker"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dispatcher", help="a worker's dispatcher, host:port")
    parser.add_argument("--host", default="localhost", help="a worker's host name as the training run reaches it")
    parser.add_argument("--parent", type=int, help="end when this process ends (the run that started us)")
    args = parser.parse_args(argv)
    if args.role == "worker" and not args.dispatcher:
        parser.error("a worker needs --dispatcher host:port")
    import tensorflow as tf

    service = tf.data.experimental.service
    if args.role == "dispatcher":
        server = service.DispatchServer(service.DispatcherConfig(port=args.port, worker_timeout_ms=WORKER_TIMEOUT_MS))
    else:
        server = service.WorkerServer(service.WorkerConfig(dispatcher_address=args.dispatcher, port=args.port,
                                                           worker_address=f"{args.host}:{args.port}"))
    print(f"tf.data service {args.role} listening on port {args.port}", flush=True)
    if args.parent:
        while os.getppid() == args.parent:  # a run killed with -9 leaves no server behind
            time.sleep(1)
        os._exit(0)
    server.join()


if __name__ == "__main__":
    main()
