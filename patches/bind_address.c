/*
 * bind_address.c: makes TensorFlow's gRPC server listen on one address.
 *
 * TensorFlow's server always asks gRPC for "0.0.0.0:PORT"
 * (tensorflow/core/distributed_runtime/rpc/grpc_server_lib.cc), and gRPC
 * turns that wildcard into a dual-stack "[::]:PORT" socket: every IPv4 and
 * IPv6 interface, with no authentication. TensorFlow has no option to change
 * it. tfonline preloads this library (LD_PRELOAD) into the node processes it
 * starts, with TFONLINE_BIND_ADDRESS set to the one address they may listen
 * on (127.0.0.1 unless the user asks for another).
 *
 * What it does, and only when TFONLINE_BIND_ADDRESS is set: a bind() to the
 * IPv4 or IPv6 wildcard address is made to that address instead, with the
 * same port. A wildcard bind of the other family fails with EADDRNOTAVAIL,
 * which gRPC answers by trying the family that works (it tries [::] first,
 * then 0.0.0.0). Every other bind() is left exactly as asked. An address
 * that does not parse makes every wildcard bind fail: nothing listens on
 * more than it was told to.
 *
 * Built by `pip install` as the extension tfonline._bind_address (it holds
 * no Python code; tfonline only preloads it). Tested by
 * tests/test_security.py.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_function)(int, const struct sockaddr *, socklen_t);

static int real_bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_function next;
    if (next == NULL) {
        next = (bind_function)dlsym(RTLD_NEXT, "bind");
        if (next == NULL) {
            errno = ENOSYS;
            return -1;
        }
    }
    return next(fd, addr, len);
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    const char *wanted = getenv("TFONLINE_BIND_ADDRESS");
    if (wanted == NULL || wanted[0] == '\0' || addr == NULL) {
        return real_bind(fd, addr, len);
    }
    struct in_addr wanted4;
    struct in6_addr wanted6;
    int is4 = inet_pton(AF_INET, wanted, &wanted4) == 1;
    int is6 = !is4 && inet_pton(AF_INET6, wanted, &wanted6) == 1;

    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in in4;
        memcpy(&in4, addr, sizeof in4);
        if (in4.sin_addr.s_addr != htonl(INADDR_ANY)) {
            return real_bind(fd, addr, len);
        }
        if (!is4) {
            errno = EADDRNOTAVAIL;
            return -1;
        }
        in4.sin_addr = wanted4;
        return real_bind(fd, (const struct sockaddr *)&in4, sizeof in4);
    }
    if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 in6;
        memcpy(&in6, addr, sizeof in6);
        if (!IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr)) {
            return real_bind(fd, addr, len);
        }
        if (!is6) {
            errno = EADDRNOTAVAIL;
            return -1;
        }
        in6.sin6_addr = wanted6;
        return real_bind(fd, (const struct sockaddr *)&in6, sizeof in6);
    }
    return real_bind(fd, addr, len);
}
