# Sourced by scripts/test and scripts/test-aarch64: the test sources of the
# ops and models (the numeric kernels, which differ between the reference and
# tuned builds and between architectures), as doctest's --source-file takes
# them, and the two slow learning checks both leave out.
op_model_tests='*test_elementwise.cpp,*test_reduce.cpp,*test_shape.cpp,*test_matmul.cpp,*test_nn.cpp,*test_attention.cpp,*test_routing.cpp,*test_layers.cpp,*test_module.cpp,*test_mha.cpp,*test_moa.cpp,*test_moh.cpp,*test_mae.cpp,*test_models.cpp,*test_transformer.cpp,*test_decoding.cpp,*test_optim.cpp'
slow_learning_checks='learning: every attention type in a DecoderLM*,learning: every attention type in an EncoderDecoder*'
