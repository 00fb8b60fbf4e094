# A file-based OLM catalog serving tinycode-operator (`make catalog-build`).
# Build context: the directory holding configs/ (the rendered catalog).
ARG OPM_IMAGE=quay.io/operator-framework/opm:v1.60.0
FROM ${OPM_IMAGE}
COPY configs /configs
# Pre-build the serving cache so the catalog pod starts fast and its root
# filesystem can stay read-only.
RUN ["/bin/opm", "serve", "/configs", "--cache-dir=/tmp/cache", "--cache-only"]
LABEL operators.operatorframework.io.index.configs.v1=/configs
ENTRYPOINT ["/bin/opm"]
CMD ["serve", "/configs", "--cache-dir=/tmp/cache"]
